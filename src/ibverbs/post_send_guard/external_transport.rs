//! A transport defined outside the guard's module, as the mlx5 module's DC initiator will be: its
//! own per-queue-pair context (not `Default`), its own destination step and setter, and a
//! provider entry outside `ibv_qp_ex`.
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_qp_ex, ibv_send_flags};
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

use super::recording::{all_entries, record, recording_qp, take_calls};
use super::{
    entry, sealed, Destination, LocalBufferHandle, Operation, PendingRequest, PostSendErrorKind, PostSendGuard,
    RemoteMemoryAccess, Transport,
};

/// The per-queue-pair context: a pointer, as DC's mlx5 view of the queue pair will be.
#[derive(Clone, Copy)]
struct ExtendedView(NonNull<u32>);

enum External {}

impl sealed::Sealed for External {}

impl Transport for External {
    type Context = ExtendedView;
    type AfterOperation<'g, O: Operation> = ExternalDestination<'g, O>;

    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, context: ExtendedView,
    ) -> ExternalDestination<'_, O> {
        ExternalDestination { request, context }
    }
}

impl RemoteMemoryAccess for External {}

struct ExternalDestination<'g, O: Operation> {
    request: PendingRequest<'g, O>,
    context: ExtendedView,
}

impl<'g, O: Operation> ExternalDestination<'g, O> {
    fn setup_address(self, key: u64) -> LocalBufferHandle<'g, O, ExternalAddress> {
        LocalBufferHandle::new(
            self.request,
            ExternalAddress {
                view: self.context,
                key,
            },
        )
    }
}

#[derive(Clone, Copy)]
struct ExternalAddress {
    view: ExtendedView,
    key: u64,
}

impl sealed::Sealed for ExternalAddress {}

// SAFETY: it calls the recording table's external entry only.
unsafe impl Destination for ExternalAddress {
    const ENTRY: u32 = entry::FIRST_EXTERNAL;
    const ENTRY_NAME: &'static str = "wr_set_external_addr";

    unsafe fn set(self, _qp: *mut ibv_qp_ex) {
        record(format!(
            "external_addr view={} key={:#x}",
            *self.view.0.as_ptr(),
            self.key
        ));
    }
}

#[test]
fn a_transport_of_another_module_plugs_in_with_its_own_step_and_entry() {
    let mut qp = recording_qp();
    let mut view = 42u32;
    let context = ExtendedView(NonNull::from(&mut view));
    let entries = all_entries(&mut qp);
    take_calls();
    // Without the external entry, the request is refused before the provider.
    // SAFETY: the recording table outlives the guard; the context points at `view`.
    let mut guard = unsafe { PostSendGuard::<External>::start(NonNull::from(&mut *qp), entries, context) };
    guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_address(0xdc)
        .setup_inline_data(b"x");
    assert!(matches!(
        guard.post().unwrap_err().0,
        PostSendErrorKind::OperationNotEnabled {
            index: 0,
            entry: "wr_set_external_addr",
            ..
        }
    ));
    assert_eq!(take_calls(), ["start", "abort"]);
    // With it, the calls come in the contract's order.
    let entries = entries.with(entry::FIRST_EXTERNAL);
    // SAFETY: as above.
    let mut guard = unsafe { PostSendGuard::<External>::start(NonNull::from(&mut *qp), entries, context) };
    // SAFETY: the recorder does not touch the buffer.
    unsafe {
        guard
            .construct_wr(2, WorkRequestFlags::Signaled)
            .setup_write(5, 0x100)
            .setup_address(0xdc)
            .setup_sge(1, 0x200, 8)
    };
    guard.post().unwrap();
    let signaled = ibv_send_flags::IBV_SEND_SIGNALED.0;
    assert_eq!(
        take_calls(),
        [
            "start".to_string(),
            format!("write wr_id=2 flags={signaled:#x} rkey=0x5 addr=0x100"),
            "external_addr view=42 key=0xdc".to_string(),
            "sge lkey=0x1 addr=0x200 len=8".to_string(),
            "complete".to_string(),
        ]
    );
}
