// Through a pool, the destination is the batch's: a request has no DC address step.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext_dc_pool::DcInitiatorPool;
use sideway_ext_dc_pool::types::DestinationId;

fn addressed(pool: &mut DcInitiatorPool, destination: DestinationId, ah: &AddressHandle) {
    let mut guard = pool.start_post_send(destination).unwrap();
    guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .unwrap()
        .setup_send()
        .setup_dc_addr(ah, 7, 9)
        .setup_inline_data(b"x");
    guard.post().unwrap();
}

fn main() {}
