//! DC queue pairs (DC initiator and DC target) on devices.
//!
//! - On the device of `SIDEWAY_EXT_TEST_DEVICE` (rxe0 in the SoftRoCE VM, not mlx5): creation
//!   is the typed "not supported", with libmlx5 visible and with it hidden, and bad input is
//!   refused before any library call.
//! - On the ConnectX device of `SIDEWAY_EXT_TEST_MLX5_DEVICE` (`mlx5_hw_` tests, one at a time):
//!   a DC initiator talks to a DC target on the same port: SEND through the target's SRQ, RDMA
//!   WRITE and READ, each request addressed with its DCT number and key; a wrong key puts the
//!   initiator in error and `recover` brings it back. They have not run on hardware yet.
#![cfg(feature = "mlx5")]
mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serial_test::serial;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::queue_pair::{
    QueuePairState, SendOperationFlags, SetInlineData, SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::mlx5::dc_initiator::{CreateDcInitiatorErrorKind, DcInitiatorBringUp};
use sideway_ext::mlx5::dc_target::{CreateDcTargetErrorKind, DcTargetBringUp};
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

const MELLANOX_VENDOR_ID: u32 = 0x02c9;

fn require_not_mellanox(ctx: &DeviceContext) {
    let vendor_id = ctx.query_device().expect("query_device").vendor_id();
    assert_ne!(
        vendor_id, MELLANOX_VENDOR_ID,
        "this test checks a device that is not mlx5; on a ConnectX run the mlx5_hw_ tests instead"
    );
}

/// DC on a device that is not mlx5 is the typed "not supported", for both queue-pair types.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dc_on_a_device_that_is_not_mlx5_is_not_supported() {
    let ctx = common::open_test_device();
    require_not_mellanox(&ctx);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(16).build().expect("CQ");
    let err = pd.create_dci_builder().setup_send_cq(cq.clone()).build().unwrap_err();
    assert!(err.is_not_supported(), "{err:?}");
    assert!(matches!(err.0, CreateDcInitiatorErrorKind::NotSupported));
    let srq = pd.create_srq_builder().build().expect("SRQ");
    let err = pd
        .create_dct_builder()
        .setup_recv_cq(cq)
        .setup_srq(srq)
        .setup_dc_key(0x1234)
        .build()
        .unwrap_err();
    assert!(err.is_not_supported(), "{err:?}");
}

/// Where the dynamic loader finds `libmlx5.so.1`, resolved to the real file.
fn libmlx5_path() -> Option<PathBuf> {
    let output = Command::new("ldconfig").arg("-p").output().ok()?;
    let listing = String::from_utf8_lossy(&output.stdout);
    let line = listing.lines().find(|l| l.trim_start().starts_with("libmlx5.so.1 "))?;
    std::fs::canonicalize(line.rsplit("=> ").next()?.trim()).ok()
}

/// The same without libmlx5: this test binary runs the test above again, in a private mount
/// namespace where libmlx5 reads empty (rdma-mummy-sys cannot load it).
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dc_without_libmlx5_is_not_supported() {
    let ctx = common::open_test_device();
    require_not_mellanox(&ctx);
    let test = "dc_on_a_device_that_is_not_mlx5_is_not_supported";
    let binary = std::env::current_exe().expect("current_exe");
    let mut command = match libmlx5_path() {
        // Nothing to hide: the run without libmlx5 is the test above.
        None => Command::new(&binary),
        Some(libmlx5) => {
            // SAFETY: geteuid has no preconditions.
            assert_eq!(
                unsafe { libc::geteuid() },
                0,
                "hiding libmlx5 needs root (a private mount namespace): scripts/device-suite runs as root"
            );
            let script = r#"lib=$1; shift; mount --bind /dev/null "$lib" && test ! -s "$lib" || exit 97; exec "$@""#;
            let mut command = Command::new("unshare");
            command
                .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
                .arg(libmlx5)
                .arg(&binary);
            command
        },
    };
    let output = command
        .args(["--exact", test, "--include-ignored", "--test-threads=1"])
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Bad input is refused before any library call, on any device.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn bad_dc_input_is_refused_before_the_library() {
    let ctx = common::open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(16).build().expect("CQ");
    let err = pd.create_dci_builder().build().unwrap_err();
    assert!(
        matches!(err.0, CreateDcInitiatorErrorKind::MissingSendCompletionQueue),
        "{err:?}"
    );
    let err = pd
        .create_dci_builder()
        .setup_send_cq(cq.clone())
        .setup_send_ops_flags(SendOperationFlags::Send | SendOperationFlags::LocalInvalidate)
        .build()
        .unwrap_err();
    assert!(
        matches!(err.0, CreateDcInitiatorErrorKind::UnsupportedSendOperations { .. }),
        "{err:?}"
    );
    // A DC target receives only through a shared receive queue.
    let err = pd.create_dct_builder().setup_recv_cq(cq.clone()).build().unwrap_err();
    assert!(
        matches!(err.0, CreateDcTargetErrorKind::MissingSharedReceiveQueue),
        "{err:?}"
    );
    let srq = pd.create_srq_builder().build().expect("SRQ");
    let err = pd.create_dct_builder().setup_srq(srq).build().unwrap_err();
    assert!(
        matches!(err.0, CreateDcTargetErrorKind::MissingReceiveCompletionQueue),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// ConnectX hardware.

const MLX5_DEVICE_VARIABLE: &str = "SIDEWAY_EXT_TEST_MLX5_DEVICE";
const TIMEOUT: Duration = Duration::from_secs(10);

fn open_mlx5_test_device() -> Arc<DeviceContext> {
    let name = std::env::var(MLX5_DEVICE_VARIABLE).unwrap_or_else(|_| {
        panic!("mlx5 hardware tests need {MLX5_DEVICE_VARIABLE} to name a ConnectX-4 or newer; without one, `--skip mlx5_hw_`")
    });
    let list = DeviceList::new().expect("device list");
    let device = list
        .iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("{MLX5_DEVICE_VARIABLE}={name}: no such RDMA device"));
    device.open().expect("open the mlx5 device")
}

/// A DC initiator sends, writes and reads to a DC target on the same port; a wrong DC key puts
/// the initiator in error, and `recover` brings it back for the right one.
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dc_initiator_reaches_a_dc_target() {
    use sideway_ext::ibverbs::extension::CompletionQueueExt;
    use sideway_ext::ibverbs::work_completion::WorkCompletion;

    let ctx = open_mlx5_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(256).build().expect("CQ");
    let srq = pd.create_srq_builder().setup_max_wr(64).build().expect("SRQ");
    let mut target_buffer = common::Buffer::new(&pd, 4096);
    let initiator_buffer = common::Buffer::new(&pd, 4096);
    let (gid_index, gid) = common::local_gid(&ctx);
    let roce = ctx.query_port(1).expect("port 1").link_layer() == sideway::ibverbs::device_context::LinkLayer::Ethernet;

    let mut dct = pd
        .create_dct_builder()
        .setup_recv_cq(cq.clone())
        .setup_srq(Arc::clone(&srq))
        .setup_dc_key(0xd0d0)
        .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead)
        .build()
        .expect("DC target");
    assert_eq!(dct.dct_number(), None, "no DCT number before RTR");
    let mut bring_up = DcTargetBringUp::new(1);
    if roce {
        bring_up.setup_src_gid_index(gid_index);
    }
    dct.bring_up(&bring_up).expect("DC target to RTR");
    let dct_number = dct.dct_number().expect("a DCT number at RTR");
    let endpoint = dct.endpoint(1, gid).expect("the DC target's endpoint");
    assert_eq!(
        (endpoint.dct_number(), endpoint.dc_key(), endpoint.is_roce()),
        (dct_number, 0xd0d0, roce)
    );

    let mut dci = pd
        .create_dci_builder()
        .setup_send_cq(cq.clone())
        .setup_max_send_wr(16)
        .setup_max_inline_data(64)
        .build()
        .expect("DC initiator");
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("DC initiator to RTS");
    assert_eq!(dci.state(), QueuePairState::ReadyToSend);

    // The address handle a peer would build from the endpoint it was sent.
    let ah = endpoint.create_ah(&pd, 1, gid_index).expect("address handle");

    // A SEND consumes a receive of the target's SRQ.
    {
        let mut guard = srq.start_post_recv();
        // SAFETY: the buffer outlives the receive.
        unsafe {
            guard
                .construct_wr(100)
                .setup_sge(target_buffer.lkey(), target_buffer.addr(0), 64)
        };
        guard.post().expect("post receive");
    }
    target_buffer.write(1024, b"read me over DC");
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(&ah, dct_number, 0xd0d0)
        .setup_inline_data(b"hello over DC");
    guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_write(target_buffer.rkey(), target_buffer.addr(512))
        .setup_dc_addr(&ah, dct_number, 0xd0d0)
        .setup_inline_data(b"written over DC");
    // SAFETY: the buffer outlives the request.
    unsafe {
        guard
            .construct_wr(3, WorkRequestFlags::Signaled)
            .setup_read(target_buffer.rkey(), target_buffer.addr(1024))
            .setup_dc_addr(&ah, dct_number, 0xd0d0)
            .setup_sge(initiator_buffer.lkey(), initiator_buffer.addr(0), 15)
    };
    guard.post().expect("post DC requests");
    let completions = common::wait_completions(cq.as_ref(), 4, TIMEOUT);
    for wc in &completions {
        assert!(wc.is_success(), "{wc:?}");
    }
    let receive = completions
        .iter()
        .find(|wc| wc.wr_id() == 100)
        .expect("the receive completed");
    assert_eq!(receive.byte_len(), 13);
    assert_eq!(target_buffer.read(0, 13), b"hello over DC");
    assert_eq!(target_buffer.read(512, 15), b"written over DC");
    assert_eq!(initiator_buffer.read(0, 15), b"read me over DC");

    // A wrong key: an error completion, the initiator in error for every destination.
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(4, WorkRequestFlags::Signaled)
        .setup_write(target_buffer.rkey(), target_buffer.addr(0))
        .setup_dc_addr(&ah, dct_number, 0xbad)
        .setup_inline_data(b"x");
    guard.post().expect("post");
    let failed = common::wait_completions(cq.as_ref(), 1, TIMEOUT);
    assert!(!failed[0].is_success(), "a wrong DC key must fail: {:?}", failed[0]);
    let mut wcs = [WorkCompletion::default(); 4];
    std::thread::sleep(Duration::from_millis(100));
    let _ = cq.poll_work_completions(&mut wcs);
    dci.recover().expect("recover the DC initiator");
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(5, WorkRequestFlags::Signaled)
        .setup_write(target_buffer.rkey(), target_buffer.addr(2048))
        .setup_dc_addr(&ah, dct_number, 0xd0d0)
        .setup_inline_data(b"after recovery");
    guard.post().expect("post after recovery");
    let done = common::wait_completions(cq.as_ref(), 1, TIMEOUT);
    assert!(done[0].is_success(), "{:?}", done[0]);
    assert_eq!(target_buffer.read(2048, 14), b"after recovery");
}

/// DCI streams: a wrong key on one stream errors that stream; if the DC initiator is still RTS
/// (only the stream errored), `reset_stream` makes the stream usable again, else `recover` does.
/// Needs a ConnectX with DCI streams (ConnectX-6 Dx or newer): on one without, it fails saying so.
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX with DCI streams"]
#[serial]
fn mlx5_hw_dci_stream_reset_after_an_error() {
    use sideway_ext::mlx5::dc_initiator::DciStreams;
    use sideway_ext::mlx5::device_context::Mlx5DeviceContext;

    let ctx = open_mlx5_test_device();
    let caps = Mlx5DeviceContext::new(ctx.clone())
        .query_dc_capabilities()
        .expect("DC capabilities")
        .dci_streams()
        .expect("this test needs a device with DCI streams (dci_streams_caps)");
    assert!(
        caps.max_log_num_concurrent >= 1 && caps.max_log_num_errored >= 1,
        "{caps:?}"
    );
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
    let srq = pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ");
    let buffer = common::Buffer::new(&pd, 4096);
    let (gid_index, gid) = common::local_gid(&ctx);
    let roce = ctx.query_port(1).expect("port 1").link_layer() == sideway::ibverbs::device_context::LinkLayer::Ethernet;
    let mut dct = pd
        .create_dct_builder()
        .setup_recv_cq(cq.clone())
        .setup_srq(srq)
        .setup_dc_key(7)
        .build()
        .expect("DC target");
    let mut bring_up = DcTargetBringUp::new(1);
    if roce {
        bring_up.setup_src_gid_index(gid_index);
    }
    dct.bring_up(&bring_up).expect("DC target to RTR");
    let endpoint = dct.endpoint(1, gid).expect("endpoint");
    let ah = endpoint.create_ah(&pd, 1, gid_index).expect("address handle");
    let mut dci = pd
        .create_dci_builder()
        .setup_send_cq(cq.clone())
        .setup_max_inline_data(16)
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 1,
            log_num_errored: 1,
        })
        .build()
        .expect("DC initiator with streams");
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("DC initiator to RTS");
    let write = |dci: &mut sideway_ext::mlx5::dc_initiator::DcInitiator, key: u64, stream: u16| {
        let mut guard = dci.start_post_send();
        guard
            .construct_wr(u64::from(stream), WorkRequestFlags::Signaled)
            .setup_write(buffer.rkey(), buffer.addr(0))
            .setup_dc_addr_stream(&ah, endpoint.dct_number(), key, stream)
            .setup_inline_data(b"stream");
        guard.post().expect("post");
        common::wait_completions(cq.as_ref(), 1, TIMEOUT).remove(0)
    };
    assert!(write(&mut dci, 7, 0).is_success());
    assert!(!write(&mut dci, 0xbad, 1).is_success(), "a wrong key must fail");
    match dci.query_state().expect("query the DC initiator") {
        QueuePairState::ReadyToSend => dci.reset_stream(1).expect("reset the errored stream"),
        _ => dci.recover().expect("recover the DC initiator"),
    }
    assert!(write(&mut dci, 7, 1).is_success(), "the stream works again");
    assert!(matches!(
        dci.reset_stream(2).unwrap_err().0,
        sideway_ext::mlx5::dc_initiator::ResetDciStreamErrorKind::InvalidStream {
            stream_id: 2,
            streams: 2
        }
    ));
}
