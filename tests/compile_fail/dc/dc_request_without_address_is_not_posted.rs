// A DC request that skipped its address cannot reach its data step, so it cannot join the
// batch: dropping it halfway leaves nothing; what it returns is not a data step either.
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::initiator::DcInitiator;

fn without_address(dci: &mut DcInitiator) {
    let mut guard = dci.start_post_send();
    unsafe {
        guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .setup_write(1, 0x1000)
            .setup_sge(2, 0x2000, 64)
    };
}

fn main() {}
