//! A DC initiator as libmlx5's `mlx5_create_qp` leaves it, over plain memory, with libmlx5's own
//! builders (`mlx5_qp_fill_wr_pfns`) in its `ibv_qp_ex` and mlx5 view; and an address handle as
//! `mlx5_create_ah` leaves one.
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};

use super::events::{take_events, MmioEvent};
use super::ffi;

/// What the DCI is created with: the send queue `mlx5_create_qp` would grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DciShape {
    /// Send queue slots of 64 bytes (`sq.wqe_cnt`), a power of two.
    pub wqe_count: u32,
    /// The inline data asked for; libmlx5 grants at least this
    /// ([`OracleDci::max_inline_data`]).
    pub max_inline_data: u32,
    /// Scatter/gather entries per request (`sq.max_gs`).
    pub max_send_sge: u32,
    /// Every request signalled (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// The operations it is created with (`IBV_QP_EX_WITH_*`); they size its requests as
    /// `mlx5_calc_send_wqe` does. libmlx5 installs every DCI builder whatever this says.
    pub send_ops_flags: u64,
    /// Stream addressing: libmlx5 installs `wr_set_dc_addr_stream` on every DCI, so this only
    /// tells the tests which setter to drive.
    pub streams: bool,
    /// The BlueFlame buffer size (`bf->buf_size`, 256 on a ConnectX); 0 for a DCI without
    /// BlueFlame (`uuarn` 0, as `mlx5dv_init_obj` then reports).
    pub blueflame_size: u32,
    /// Its queue pair number, which every WQE carries.
    pub qp_number: u32,
}

/// The raw parts of a DCI's send queue, as `mlx5dv_init_obj`'s `struct mlx5dv_qp` gives them.
#[derive(Debug, Clone, Copy)]
pub struct SendQueueLayout {
    /// The send queue's first slot.
    pub buffer: NonNull<u8>,
    /// Its slots, a power of two.
    pub wqe_count: u32,
    /// Bytes a slot (64).
    pub stride: u32,
    /// The doorbell record's two big-endian words (the send counter is the second).
    pub doorbell_record: NonNull<u32>,
    /// The BlueFlame/doorbell register.
    pub blueflame: NonNull<u8>,
    /// Its buffer size; 0 without BlueFlame.
    pub blueflame_size: u32,
}

/// A DCI as `mlx5_create_qp` leaves it, in the RTS state, over plain memory: its requests go
/// through libmlx5's own `qp.c`.
pub struct OracleDci {
    raw: NonNull<ffi::OracleDciC>,
    shape: DciShape,
    variant: &'static ffi::Variant,
}

impl OracleDci {
    /// Creates one whose barriers and MMIO stores are recorded ([`take_events`](Self::take_events));
    /// panics on a shape libmlx5 would refuse (a count not a power of two, a WQE larger than the
    /// queue).
    pub fn new(shape: &DciShape) -> Self {
        Self::of(shape, &ffi::RECORDED)
    }

    /// As [`new`](Self::new), over libmlx5 built with rdma-core's own barriers and MMIO stores
    /// (`util/udma_barrier.h`, `util/mmio.h`), nothing recorded: for counting the instructions of
    /// libmlx5's post path as a distribution builds it.
    pub fn unrecorded(shape: &DciShape) -> Self {
        Self::of(shape, &ffi::PLAIN)
    }

    fn of(shape: &DciShape, variant: &'static ffi::Variant) -> Self {
        let c = ffi::DciShapeC {
            wqe_count: shape.wqe_count,
            max_inline_data: shape.max_inline_data,
            max_send_sge: shape.max_send_sge,
            sq_sig_all: shape.sq_sig_all.into(),
            send_ops_flags: shape.send_ops_flags,
            blueflame_size: shape.blueflame_size,
            qp_number: shape.qp_number,
        };
        // SAFETY: the shim reads the shape and returns an owned object, or aborts.
        let raw = unsafe { (variant.dci_new)(&c) };
        Self {
            raw: NonNull::new(raw).expect("oracle_dci_new"),
            shape: shape.clone(),
            variant,
        }
    }

    /// The shape it was created with.
    pub fn shape(&self) -> &DciShape {
        &self.shape
    }

    /// Its `ibv_qp_ex`, libmlx5's builders installed: `ibv_wr_start(qp_ex)` and the rest drive
    /// libmlx5. Valid while `self` is.
    pub fn qp_ex(&self) -> NonNull<ibv_qp_ex> {
        // SAFETY: the object is alive; the shim returns a pointer into it.
        NonNull::new(unsafe { (self.variant.dci_qp_ex)(self.raw.as_ptr()) }).expect("qp_ex")
    }

    /// Its mlx5 view (`mlx5dv_qp_ex_from_ibv_qp_ex`), with `wr_set_dc_addr` and
    /// `wr_set_dc_addr_stream`. Valid while `self` is.
    pub fn mlx5_qp_ex(&self) -> NonNull<mlx5dv_qp_ex> {
        // SAFETY: as qp_ex.
        NonNull::new(unsafe { (self.variant.dci_mlx5)(self.raw.as_ptr()) }).expect("mlx5_qp_ex")
    }

    fn view(&self) -> ffi::SendQueueViewC {
        let mut view = std::mem::MaybeUninit::<ffi::SendQueueViewC>::uninit();
        // SAFETY: the shim fills every field.
        unsafe {
            (self.variant.dci_view)(self.raw.as_ptr(), view.as_mut_ptr());
            view.assume_init()
        }
    }

    /// The raw parts `mlx5dv_init_obj` would give.
    pub fn layout(&self) -> SendQueueLayout {
        let view = self.view();
        SendQueueLayout {
            buffer: NonNull::new(view.buffer).expect("buffer"),
            wqe_count: view.wqe_count,
            stride: view.stride,
            doorbell_record: NonNull::new(view.doorbell_record).expect("doorbell record"),
            blueflame: NonNull::new(view.blueflame).expect("blueflame"),
            blueflame_size: view.blueflame_size,
        }
    }

    /// The send queue's bytes.
    pub fn send_queue(&self) -> &[u8] {
        let view = self.view();
        // SAFETY: the buffer holds wqe_count slots of stride bytes, alive while self is.
        unsafe { std::slice::from_raw_parts(view.buffer, (view.wqe_count * view.stride) as usize) }
    }

    /// The send queue's bytes, to write (the stale contents a test starts from).
    pub fn send_queue_mut(&mut self) -> &mut [u8] {
        let view = self.view();
        // SAFETY: as send_queue, and `&mut self` makes it the only access.
        unsafe { std::slice::from_raw_parts_mut(view.buffer, (view.wqe_count * view.stride) as usize) }
    }

    /// The doorbell record's two words, as stored (big-endian values).
    pub fn doorbell_record(&self) -> [u32; 2] {
        let view = self.view();
        // SAFETY: two aligned words, alive while self is.
        unsafe { [view.doorbell_record.read(), view.doorbell_record.add(1).read()] }
    }

    /// The BlueFlame register's bytes: both halves (2 × the BlueFlame size), or the doorbell
    /// word's 8 bytes without BlueFlame.
    pub fn blueflame(&self) -> &[u8] {
        let view = self.view();
        let len = if view.blueflame_size == 0 {
            8
        } else {
            2 * view.blueflame_size as usize
        };
        // SAFETY: the shim allocated at least that much, alive while self is.
        unsafe { std::slice::from_raw_parts(view.blueflame, len) }
    }

    /// The half of the BlueFlame register the next doorbell goes to (`bf->offset`).
    pub fn blueflame_offset(&self) -> u32 {
        self.view().blueflame_offset
    }

    /// The next request's index (`sq.cur_post`), counting 64-byte slots, not wrapped.
    pub fn posting_index(&self) -> u32 {
        self.view().posting_index
    }

    /// Requests posted (`sq.head`) and completed (`sq.tail`, which libmlx5's poller advances).
    pub fn head_and_tail(&self) -> (u32, u32) {
        let view = self.view();
        (view.head, view.tail)
    }

    /// Retires every request posted, as libmlx5's poller does on the completion of the last
    /// (`sq.tail = sq.head`): the queue has room for `max_post` requests again.
    pub fn retire_all(&mut self) {
        // SAFETY: the object is alive.
        unsafe { (self.variant.dci_retire_all)(self.raw.as_ptr()) }
    }

    /// Requests the queue holds at once (`sq.max_post`), as `mlx5_calc_sq_size` grants.
    pub fn max_post(&self) -> u32 {
        self.view().max_post
    }

    /// The inline data granted (`qp->max_inline_data`).
    pub fn max_inline_data(&self) -> u32 {
        self.view().max_inline_data
    }

    /// The user index its CQEs carry (CQE version 1's `srqn_uidx`).
    pub fn user_index(&self) -> u32 {
        self.view().user_index
    }

    /// The `wr_id` of the request that starts at slot `index` (`sq.wrid`).
    pub fn wr_id(&self, index: u32) -> u64 {
        let view = self.view();
        assert!(index < view.wqe_count);
        // SAFETY: wqe_count entries.
        unsafe { view.wrid.add(index as usize).read() }
    }

    /// The request count at the request that starts at slot `index` (`sq.wqe_head`).
    pub fn wqe_head(&self, index: u32) -> u32 {
        let view = self.view();
        assert!(index < view.wqe_count);
        // SAFETY: wqe_count entries.
        unsafe { view.wqe_head.add(index as usize).read() }
    }

    /// Fills the send queue and the BlueFlame register with pseudo-random bytes from `seed`:
    /// the stale contents libmlx5 leaves unwritten are then visible.
    pub fn fill_stale(&mut self, seed: u64) {
        let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for byte in self.send_queue_mut() {
            *byte = next() as u8;
        }
        let view = self.view();
        let len = if view.blueflame_size == 0 {
            8
        } else {
            2 * view.blueflame_size as usize
        };
        // SAFETY: as blueflame; `&mut self` makes it the only access.
        let register = unsafe { std::slice::from_raw_parts_mut(view.blueflame, len) };
        for byte in register {
            *byte = next() as u8;
        }
    }

    /// The barriers and MMIO stores this thread recorded since the last call (every recorded
    /// oracle object's on this thread), stores as offsets from this DCI's register; an
    /// [`unrecorded`](Self::unrecorded) DCI records none.
    pub fn take_events(&mut self) -> Vec<MmioEvent> {
        take_events(self.view().blueflame)
    }

    pub(crate) fn raw(&self) -> NonNull<ffi::OracleDciC> {
        self.raw
    }
}

impl Drop for OracleDci {
    fn drop(&mut self) {
        // SAFETY: created by oracle_dci_new, freed once.
        unsafe { (self.variant.dci_free)(self.raw.as_ptr()) }
    }
}

/// An address handle as `mlx5_create_ah` leaves one (`struct mlx5_ah`), with a given 48-byte
/// address vector (`struct mlx5_wqe_av`) that `mlx5_send_wr_set_dc_addr` copies into each WQE.
pub struct OracleAh {
    raw: NonNull<ibv_ah>,
}

impl OracleAh {
    /// One with this address vector.
    pub fn new(av: [u8; 48]) -> Self {
        // SAFETY: the shim copies 48 bytes and returns an owned object.
        let raw = unsafe { (ffi::RECORDED.ah_new)(av.as_ptr()) };
        Self {
            raw: NonNull::new(raw).expect("oracle_ah_new"),
        }
    }

    /// Its `ibv_ah`, for `mlx5dv_wr_set_dc_addr`. Valid while `self` is.
    pub fn ibv_ah(&self) -> NonNull<ibv_ah> {
        self.raw
    }

    /// Its address vector.
    pub fn av(&self) -> [u8; 48] {
        let mut av = [0; 48];
        // SAFETY: the object is alive; 48 bytes copied.
        unsafe { (ffi::RECORDED.ah_av)(self.raw.as_ptr(), av.as_mut_ptr()) };
        av
    }
}

impl Drop for OracleAh {
    fn drop(&mut self) {
        // SAFETY: created by oracle_ah_new, freed once.
        unsafe { (ffi::RECORDED.ah_free)(self.raw.as_ptr()) }
    }
}
