// A receive request handle borrows its receive guard: it cannot be used after the guard is gone.
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;

fn request_outlives_guard(srq: &SharedReceiveQueue, lkey: u32, addr: u64) {
    let request;
    {
        let mut guard = srq.start_post_recv();
        request = guard.construct_wr(1);
    }
    unsafe { request.setup_sge(lkey, addr, 64) };
}

fn main() {}
