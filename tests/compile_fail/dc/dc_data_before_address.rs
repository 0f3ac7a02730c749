// A DC request names its destination between its operation and its data: the data step is not
// reachable before the address (the WQE would be finished without one), and the error says to
// call `setup_dc_addr` (the `Addressed` bound's message), not that the method does not exist.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway_ext::mlx5::dc::initiator::DcInitiator;

fn data_before_address(dci: &mut DcInitiator) {
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_inline_data(b"no address");
}

fn main() {}
