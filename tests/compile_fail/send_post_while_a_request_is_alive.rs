// post() consumes the send guard, so it cannot run while a request handle still borrows it.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;

fn post_while_request_alive(qp: &mut SharedReceiveQueuePair<ReliableConnection>) {
    let mut guard = qp.start_post_send();
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled);
    guard.post().unwrap();
    request.setup_send().setup_inline_data(b"late");
}

fn main() {}
