// libibverbs writes the queue pair's cached state during ibv_query_qp, so a query needs the queue
// pair exclusively: it cannot be made through a shared reference (which another thread may hold
// too, as the queue pair is Sync).
use sideway::ibverbs::queue_pair::QueuePairAttributeMask;
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;

fn query(qp: &SharedReceiveQueuePair<ReliableConnection>) {
    let _ = qp.query(QueuePairAttributeMask::State);
}

fn main() {}
