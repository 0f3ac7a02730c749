// A receive guard borrows its storage mutably: one storage cannot stage two batches at once.
use sideway_ext::ibverbs::shared_receive_queue::{PostReceiveStorage, SharedReceiveQueue};

fn two_guards_one_storage(srq: &SharedReceiveQueue) {
    let mut storage = PostReceiveStorage::new();
    let first = srq.start_post_recv(&mut storage);
    let second = srq.start_post_recv(&mut storage);
    first.post().unwrap();
    second.post().unwrap();
}

fn main() {}
