// A queue pair has one batch at a time: a second send guard needs the queue pair while the first
// still holds it.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;

fn two_guards(qp: &mut SharedReceiveQueuePair<ReliableConnection>) {
    let mut first = qp.start_post_send();
    let mut second = qp.start_post_send();
    first.construct_wr(1, WorkRequestFlags::Signaled).setup_send().setup_inline_data(b"one");
    second.construct_wr(2, WorkRequestFlags::Signaled).setup_send().setup_inline_data(b"two");
}

fn main() {}
