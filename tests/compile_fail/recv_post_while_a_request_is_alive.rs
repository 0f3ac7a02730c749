// post() consumes the receive guard, so it cannot run while a request handle still borrows it.
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;

fn post_while_request_alive(srq: &SharedReceiveQueue, lkey: u32, addr: u64) {
    let mut guard = srq.start_post_recv();
    let request = guard.construct_wr(1);
    guard.post().unwrap();
    unsafe { request.setup_sge(lkey, addr, 64) };
}

fn main() {}
