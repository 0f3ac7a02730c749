//! [`ProviderEntries`]: which `ibv_qp_ex` entries a queue pair's provider filled, one bit each
//! (the `entry` module), read once when the queue pair is created.
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_qp_ex;
use sideway::ibverbs::queue_pair::SendOperationFlags;

/// The `ibv_qp_ex` entries a queue pair's provider filled, one bit per builder and setter the
/// guards call; each request checks its own bits against it before reaching the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderEntries(pub(super) u32);

/// One bit per `ibv_qp_ex` entry the guards call.
pub(crate) mod entry {
    /// `wr_send`.
    pub const SEND: u32 = 1 << 0;
    /// `wr_send_imm`.
    pub const SEND_IMM: u32 = 1 << 1;
    /// `wr_rdma_write`.
    pub const RDMA_WRITE: u32 = 1 << 2;
    /// `wr_rdma_write_imm`.
    pub const RDMA_WRITE_IMM: u32 = 1 << 3;
    /// `wr_rdma_read`.
    pub const RDMA_READ: u32 = 1 << 4;
    /// `wr_atomic_cmp_swp`.
    pub const ATOMIC_CMP_SWP: u32 = 1 << 5;
    /// `wr_atomic_fetch_add`.
    pub const ATOMIC_FETCH_ADD: u32 = 1 << 6;
    /// `wr_set_sge`.
    pub const SET_SGE: u32 = 1 << 7;
    /// `wr_set_sge_list`.
    pub const SET_SGE_LIST: u32 = 1 << 8;
    /// `wr_set_inline_data`.
    pub const SET_INLINE_DATA: u32 = 1 << 9;
    /// `wr_set_inline_data_list`.
    pub const SET_INLINE_DATA_LIST: u32 = 1 << 10;
    /// `wr_set_ud_addr`.
    pub const SET_UD_ADDR: u32 = 1 << 11;
    pub(crate) const NAMES: [&str; 12] = [
        "wr_send",
        "wr_send_imm",
        "wr_rdma_write",
        "wr_rdma_write_imm",
        "wr_rdma_read",
        "wr_atomic_cmp_swp",
        "wr_atomic_fetch_add",
        "wr_set_sge",
        "wr_set_sge_list",
        "wr_set_inline_data",
        "wr_set_inline_data_list",
        "wr_set_ud_addr",
    ];
}

/// The send operations a guard can post, with their `ibv_qp_ex` entry bit.
const OPERATIONS: [(SendOperationFlags, u32); 7] = [
    (SendOperationFlags::Send, entry::SEND),
    (SendOperationFlags::SendWithImmediate, entry::SEND_IMM),
    (SendOperationFlags::Write, entry::RDMA_WRITE),
    (SendOperationFlags::WriteWithImmediate, entry::RDMA_WRITE_IMM),
    (SendOperationFlags::Read, entry::RDMA_READ),
    (SendOperationFlags::AtomicCompareAndSwap, entry::ATOMIC_CMP_SWP),
    (SendOperationFlags::AtomicFetchAndAdd, entry::ATOMIC_FETCH_ADD),
];

/// Error returned by [`ProviderEntries::new`]: an entry the queue pair needs is NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the provider did not fill `{0}` of struct ibv_qp_ex")]
pub struct MissingProviderEntry(pub &'static str);

impl ProviderEntries {
    /// No entry at all.
    pub const NONE: Self = Self(0);

    /// Reads which entries of `qp_ex` are filled: a NULL batch entry, builder of an operation in
    /// `granted`, `wr_set_sge` or `wr_set_sge_list` is [`MissingProviderEntry`].
    ///
    /// # Safety
    ///
    /// `qp_ex` must point to a live `struct ibv_qp_ex`.
    pub unsafe fn new(qp_ex: NonNull<ibv_qp_ex>, granted: SendOperationFlags) -> Result<Self, MissingProviderEntry> {
        let qp = qp_ex.as_ref();
        for (filled, name) in [
            (qp.wr_start.is_some(), "wr_start"),
            (qp.wr_complete.is_some(), "wr_complete"),
            (qp.wr_abort.is_some(), "wr_abort"),
        ] {
            if !filled {
                return Err(MissingProviderEntry(name));
            }
        }
        let filled = [
            qp.wr_send.is_some(),
            qp.wr_send_imm.is_some(),
            qp.wr_rdma_write.is_some(),
            qp.wr_rdma_write_imm.is_some(),
            qp.wr_rdma_read.is_some(),
            qp.wr_atomic_cmp_swp.is_some(),
            qp.wr_atomic_fetch_add.is_some(),
            qp.wr_set_sge.is_some(),
            qp.wr_set_sge_list.is_some(),
            qp.wr_set_inline_data.is_some(),
            qp.wr_set_inline_data_list.is_some(),
            qp.wr_set_ud_addr.is_some(),
        ];
        let has = |bit: u32| filled[bit.trailing_zeros() as usize];
        let needed = |bit: u32| match has(bit) {
            true => Ok(bit),
            false => Err(MissingProviderEntry(entry::NAMES[bit.trailing_zeros() as usize])),
        };
        let mut bits = 0;
        for (_, bit) in OPERATIONS.into_iter().filter(|(flag, _)| granted.contains(*flag)) {
            bits |= needed(bit)?;
        }
        bits |= needed(entry::SET_SGE)? | needed(entry::SET_SGE_LIST)?;
        for bit in [entry::SET_INLINE_DATA, entry::SET_INLINE_DATA_LIST, entry::SET_UD_ADDR] {
            bits |= if has(bit) { bit } else { 0 };
        }
        Ok(Self(bits))
    }

    /// The entries as a bit mask (see the hidden `entry` module).
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every entry of `bits` is there.
    pub fn contains(self, bits: u32) -> bool {
        self.0 & bits == bits
    }

    /// The name of the first entry of `needed` that is missing.
    pub(super) fn name_of_first_missing(self, needed: u32) -> &'static str {
        let missing = needed & !self.0;
        entry::NAMES
            .get(missing.trailing_zeros() as usize)
            .copied()
            .unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    //! Which entries a queue pair's table has, read from the table itself (a hand-made one: the
    //! rxe tests post through rxe's, which fills the builders of the operations asked for only).
    use std::mem::MaybeUninit;

    use super::*;

    unsafe extern "C" fn batch(_: *mut ibv_qp_ex) {}
    unsafe extern "C" fn complete(_: *mut ibv_qp_ex) -> i32 {
        0
    }
    unsafe extern "C" fn send(_: *mut ibv_qp_ex) {}
    unsafe extern "C" fn write(_: *mut ibv_qp_ex, _: u32, _: u64) {}
    unsafe extern "C" fn sge(_: *mut ibv_qp_ex, _: u32, _: u64, _: u32) {}
    unsafe extern "C" fn sge_list(_: *mut ibv_qp_ex, _: usize, _: *const rdma_mummy_sys::ibv_sge) {}
    unsafe extern "C" fn inline(_: *mut ibv_qp_ex, _: *mut std::ffi::c_void, _: usize) {}

    /// The table rxe fills for a queue pair created with SEND only: start, complete, abort, the
    /// SEND builder, the SGE setters and `wr_set_inline_data`; every other entry NULL.
    fn send_only() -> ibv_qp_ex {
        // SAFETY: zeroes are valid for ibv_qp_ex (plain data and optional function pointers).
        let mut qp: ibv_qp_ex = unsafe { MaybeUninit::zeroed().assume_init() };
        qp.wr_start = Some(batch);
        qp.wr_complete = Some(complete);
        qp.wr_abort = Some(batch);
        qp.wr_send = Some(send);
        qp.wr_set_sge = Some(sge);
        qp.wr_set_sge_list = Some(sge_list);
        qp.wr_set_inline_data = Some(inline);
        qp
    }

    #[test]
    fn a_missing_builder_of_a_granted_operation_is_refused_at_creation() {
        let mut qp = send_only();
        // SAFETY: qp is a live ibv_qp_ex.
        let err = unsafe { ProviderEntries::new(NonNull::from(&mut qp), SendOperationFlags::Write) }.unwrap_err();
        assert_eq!(err, MissingProviderEntry("wr_rdma_write"));
        qp.wr_rdma_write = Some(write);
        // SAFETY: as above.
        unsafe { ProviderEntries::new(NonNull::from(&mut qp), SendOperationFlags::Write) }.expect("filled");
        qp.wr_complete = None;
        // SAFETY: as above.
        let err = unsafe { ProviderEntries::new(NonNull::from(&mut qp), SendOperationFlags::Send) }.unwrap_err();
        assert_eq!(err, MissingProviderEntry("wr_complete"));
    }

    #[test]
    fn an_operation_or_setter_the_queue_pair_lacks_is_left_out_and_named() {
        let mut qp = send_only();
        // SAFETY: qp is a live ibv_qp_ex.
        let entries = unsafe { ProviderEntries::new(NonNull::from(&mut qp), SendOperationFlags::Send) }.unwrap();
        assert!(entries.contains(entry::SEND | entry::SET_SGE | entry::SET_INLINE_DATA));
        // Not granted (its builder NULL): a request of it is refused by the builder's name.
        assert!(!entries.contains(entry::RDMA_WRITE));
        assert_eq!(
            entries.name_of_first_missing(entry::RDMA_WRITE | entry::SET_SGE),
            "wr_rdma_write"
        );
        // A setter the provider lacks: left out, refused by its name.
        assert!(!entries.contains(entry::SET_INLINE_DATA_LIST));
        assert_eq!(
            entries.name_of_first_missing(entry::SEND | entry::SET_INLINE_DATA_LIST),
            "wr_set_inline_data_list"
        );
    }
}
