// A DC initiator has one batch at a time.
use sideway_ext::mlx5::dc::initiator::DcInitiator;

fn two_guards(dci: &mut DcInitiator) {
    let first = dci.start_post_send();
    let second = dci.start_post_send();
    drop((first, second));
}

fn main() {}
