// poll's handler runs while poll holds the pool: a destination reported Ready is posted to after
// poll returns, not from the handler.
use sideway_ext_dc_pool::types::DcPoolEvent;
use sideway_ext_dc_pool::DcInitiatorPool;

fn post_inside_poll(mut pool: DcInitiatorPool) {
    let _ = pool.poll(|event| {
        if let DcPoolEvent::Ready { destination } = event {
            let _ = pool.start_post_send(destination);
        }
    });
}

fn main() {}
