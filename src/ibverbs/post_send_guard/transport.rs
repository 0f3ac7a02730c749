//! The transports of the guard ([`Transport`]; RC here, each other transport in a file of its
//! own) and where their requests go ([`Destination`]), set by a transport's destination step.
use rdma_mummy_sys::ibv_qp_ex;

use super::{sealed, LocalBufferHandle, Operation, PendingRequest};

/// How the requests of a queue-pair type are addressed: nothing for RC (the connection is the
/// address), an address handle and remote QPN/Q_Key for UD, an address handle, DCT number and
/// DC key for DC. Sealed.
pub trait Transport: sealed::Sealed + Sized {
    /// Per-queue-pair data the destination step needs (for DC, the mlx5 view of the queue pair).
    type Context: Copy;
    /// What an operation leads to: the data step, or first the destination step.
    type AfterOperation<'g, O: Operation>;
    /// The step after the operation of `request`, on a queue pair with `context`.
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, context: Self::Context,
    ) -> Self::AfterOperation<'_, O>;
}

/// Transports on which RDMA reads, writes and atomics can be posted.
pub trait RemoteMemoryAccess: Transport {}

/// The reliable-connection transport (RC).
#[derive(Debug)]
pub enum ReliableConnection {}

impl sealed::Sealed for ReliableConnection {}

impl Transport for ReliableConnection {
    type Context = ();
    type AfterOperation<'g, O: Operation> = LocalBufferHandle<'g, O, Connected>;

    #[inline]
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, _context: (),
    ) -> LocalBufferHandle<'_, O, Connected> {
        LocalBufferHandle::new(request, Connected)
    }
}

impl RemoteMemoryAccess for ReliableConnection {}

/// Where a request goes, set at its data step right after the operation's builder.
///
/// Open, and `unsafe` to implement: a destination of one's own (e.g. for a provider table of
/// one's own, as a simulated device has) names in `ENTRY` the entries its `set` calls, each
/// [`ProviderEntries::FIRST_EXTERNAL_FREE`](super::ProviderEntries::FIRST_EXTERNAL_FREE) or above
/// when it lies outside `ibv_qp_ex` and is not one of this crate's; the guard refuses the request
/// before the provider when the queue pair's entries lack one.
///
/// # Safety
///
/// `set` calls nothing but the entries `ENTRY` names (which the guard checked the queue pair
/// has), with handles alive as long as the destination is used.
pub unsafe trait Destination: Copy {
    /// The [`ProviderEntries`](super::ProviderEntries) bits of its setter.
    const ENTRY: u32;
    /// The setter's name, for errors.
    const ENTRY_NAME: &'static str;
    /// Calls the setter.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair inside a batch, right after a builder, with the setter's
    /// entry filled; the handles the destination names must be alive.
    unsafe fn set(self, qp: *mut ibv_qp_ex);
}

/// The destination of a connected queue pair's requests: the connection itself.
#[derive(Debug, Clone, Copy)]
pub struct Connected;

impl sealed::Sealed for Connected {}

// SAFETY: it calls nothing.
unsafe impl Destination for Connected {
    const ENTRY: u32 = 0;
    const ENTRY_NAME: &'static str = "";

    #[inline]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {}
}

#[cfg(test)]
mod external_transport_tests {
    //! A transport defined outside this module, as the mlx5 module's DC initiator will be: its
    //! own per-queue-pair context (not `Default`), its own destination step and setter, and a
    //! provider entry outside `ibv_qp_ex`.
    use std::ptr::NonNull;

    use rdma_mummy_sys::ibv_send_flags;
    use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

    use super::*;
    use crate::ibverbs::post_send_guard::recording::{all_entries, record, recording_qp, take_calls};
    use crate::ibverbs::post_send_guard::{entry, PostSendErrorKind, PostSendGuard};

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
}
