//! The operation step of a request: the setters of [`TypedWorkRequestHandle`] (`setup_send`,
//! `setup_write`, …), each handing a [`PendingRequest`] to its transport's next step.
use super::{operation, Batch, Operation, RemoteMemoryAccess, Transport};

/// A request described up to its operation; its C calls wait for the data step (opaque: what a
/// [`Transport`]'s destination step carries on).
pub struct PendingRequest<'g, O: Operation> {
    pub(super) batch: &'g mut Batch,
    pub(super) wr_id: u64,
    pub(super) wr_flags: u32,
    pub(super) operation: O,
}

/// One request being described: pick its operation.
#[must_use = "a request is added to the batch only at its data step"]
pub struct TypedWorkRequestHandle<'g, T: Transport> {
    pub(super) batch: &'g mut Batch,
    pub(super) wr_id: u64,
    pub(super) wr_flags: u32,
    pub(super) _transport: std::marker::PhantomData<T>,
}

impl<'g, T: Transport> TypedWorkRequestHandle<'g, T> {
    #[inline]
    fn with<O: Operation>(self, operation: O) -> T::AfterOperation<'g, O> {
        T::after_operation(PendingRequest {
            batch: self.batch,
            wr_id: self.wr_id,
            wr_flags: self.wr_flags,
            operation,
        })
    }

    /// A SEND (`ibv_wr_send`).
    #[inline]
    pub fn setup_send(self) -> T::AfterOperation<'g, operation::Send> {
        self.with(operation::Send {})
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`). As in sideway, `imm_data` goes to the C call
    /// unchanged and the receiver's `imm_data` gives back the same value; the C API's is big-endian
    /// (`__be32`): to match a C peer that sends `htonl(x)` and reads `ntohl(wc.imm_data)`, pass
    /// `x.to_be()` and read `u32::from_be(imm_data)`.
    #[inline]
    pub fn setup_send_imm(self, imm_data: u32) -> T::AfterOperation<'g, operation::SendWithImmediate> {
        self.with(operation::SendWithImmediate { imm_data })
    }
}

impl<'g, T: RemoteMemoryAccess> TypedWorkRequestHandle<'g, T> {
    /// An RDMA WRITE to `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_write`).
    #[inline]
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> T::AfterOperation<'g, operation::Write> {
        self.with(operation::Write { rkey, remote_addr })
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`); `imm_data` as for
    /// [`setup_send_imm`](Self::setup_send_imm). It consumes a receive at the remote end.
    #[inline]
    pub fn setup_write_imm(
        self, rkey: u32, remote_addr: u64, imm_data: u32,
    ) -> T::AfterOperation<'g, operation::WriteWithImmediate> {
        self.with(operation::WriteWithImmediate {
            rkey,
            remote_addr,
            imm_data,
        })
    }

    /// An RDMA READ from `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_read`).
    #[inline]
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> T::AfterOperation<'g, operation::Read> {
        self.with(operation::Read { rkey, remote_addr })
    }

    /// An atomic compare-and-swap on the 8 bytes at `remote_addr`; the old value lands in the
    /// local buffer (`ibv_wr_atomic_cmp_swp`).
    ///
    /// `compare` and `swap` are numbers; the byte order of the remote 8 bytes and of the old value
    /// is the device's: a ConnectX uses host order only where mlx5_core set its
    /// `atomic_req_8B_endianness_mode` so, big-endian (InfiniBand's wire order) otherwise, as rxe
    /// and other providers may too. Keep atomic variables in the device's order (UCX reads the
    /// mode, `ib_mlx5dv_md.c`).
    #[inline]
    pub fn setup_atomic_compare_swap(
        self, rkey: u32, remote_addr: u64, compare: u64, swap: u64,
    ) -> T::AfterOperation<'g, operation::AtomicCompareAndSwap> {
        self.with(operation::AtomicCompareAndSwap {
            rkey,
            remote_addr,
            compare,
            swap,
        })
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote_addr`; the old value lands in the local
    /// buffer (`ibv_wr_atomic_fetch_add`). The byte order of the remote value and of the reply is
    /// the device's, as for [`setup_atomic_compare_swap`](Self::setup_atomic_compare_swap).
    #[inline]
    pub fn setup_atomic_fetch_add(
        self, rkey: u32, remote_addr: u64, add: u64,
    ) -> T::AfterOperation<'g, operation::AtomicFetchAndAdd> {
        self.with(operation::AtomicFetchAndAdd { rkey, remote_addr, add })
    }
}
