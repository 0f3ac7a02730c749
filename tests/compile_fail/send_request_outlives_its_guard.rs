// A request handle borrows its send guard: it cannot be used after the guard is gone.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;

fn request_outlives_guard(qp: &mut SharedReceiveQueuePair<ReliableConnection>) {
    let request;
    {
        let mut guard = qp.start_post_send();
        request = guard.construct_wr(1, WorkRequestFlags::Signaled);
    }
    request.setup_send().setup_inline_data(b"late");
}

fn main() {}
