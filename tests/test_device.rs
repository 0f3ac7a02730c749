//! First device test: sideway's own objects on the device named by `SIDEWAY_EXT_TEST_DEVICE`.
mod common;

use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::AccessFlags;

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn open_device_alloc_pd_reg_mr_create_cqs() {
    let ctx = common::open_test_device();

    let attr = ctx.query_device().expect("query_device");
    assert!(attr.phys_port_cnt() >= 1, "a device has at least one port");
    assert!(attr.max_qp() > 0 && attr.max_cqe() > 0 && attr.max_mr() > 0);
    let port = ctx.query_port(1).expect("query_port(1)");
    assert!(port.gid_tbl_len() > 0);

    let pd = ctx.alloc_pd().expect("alloc_pd");

    let buffer = vec![0u8; 4096];
    let mr = unsafe {
        pd.reg_mr(
            buffer.as_ptr() as usize,
            buffer.len(),
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
        )
    }
    .expect("reg_mr");
    assert_eq!(mr.region_len(), buffer.len());
    assert_eq!(mr.get_ptr(), buffer.as_ptr() as usize);
    assert_ne!(mr.lkey(), 0);

    let mut builder = ctx.create_cq_builder();
    builder.setup_cqe(64);
    let basic = builder.build().expect("basic CQ");
    let extended = builder.build_ex().expect("extended CQ");

    // Both CQs are new and empty: polling reports exactly that.
    for cq in [
        GenericCompletionQueue::from(basic),
        GenericCompletionQueue::from(extended),
    ] {
        assert!(matches!(
            cq.start_poll(),
            Err(PollCompletionQueueError::CompletionQueueEmpty)
        ));
    }
}
