// A pool has one batch at a time (each batch holds its initiator's send queue).
use sideway_ext_dc_pool::DcInitiatorPool;
use sideway_ext_dc_pool::types::DestinationId;

fn two_guards(pool: &mut DcInitiatorPool, a: DestinationId, b: DestinationId) {
    let first = pool.start_post_send(a).unwrap();
    let second = pool.start_post_send(b).unwrap();
    drop((first, second));
}

fn main() {}
