//! The operations a request can carry, as the operation step returns them (the type parameter
//! of [`DirectRequestDestination`](super::DirectRequestDestination) and [`DirectRequestData`](super::DirectRequestData)),
//! and the segments each puts between the address vector and the data: libmlx5's
//! `_mlx5_send_wr_send`, `_mlx5_send_wr_rdma` (with `set_raddr_seg`) and `_mlx5_send_wr_atomic`
//! (with `_set_atomic_seg`), and the immediate of the `*_imm` builders.

/// An operation of a request (sealed: the writer's byte layout of each is proven against
/// libmlx5's, so only this crate provides them).
pub trait WqeOperation: private::Sealed + Copy {}

/// An operation whose data may be inline: SEND and RDMA WRITE, with or without immediate data
/// (an RDMA READ or an atomic writes into its local buffer).
pub trait InlineOperation: WqeOperation {}

pub(super) use private::{Remote, Segments};

mod private {
    /// The segments an operation puts in its request (opaque).
    #[derive(Debug, Clone, Copy)]
    pub struct Segments {
        /// Its mlx5 opcode (`mlx5_ib_opcode[]`).
        pub(in crate::send_queue) opcode: u8,
        /// The name of its libibverbs builder, for errors.
        pub(in crate::send_queue) name: &'static str,
        /// The control segment's immediate (bytes 12 to 15), as given: written only by the
        /// `*_imm` builders, left as it was otherwise.
        pub(in crate::send_queue) immediate: Option<u32>,
        pub(in crate::send_queue) remote: Remote,
    }

    /// The remote segments after the address vector.
    #[derive(Debug, Clone, Copy)]
    pub enum Remote {
        /// None: SEND.
        None,
        /// A remote address segment (`set_raddr_seg`): RDMA WRITE and READ.
        Memory { rkey: u32, remote_addr: u64 },
        /// A remote address and an atomic segment (`_set_atomic_seg`); a fetch-and-add leaves
        /// the compare field as it was (`compare` is `None`).
        Atomic {
            rkey: u32,
            remote_addr: u64,
            swap_add: u64,
            compare: Option<u64>,
        },
    }

    // Sealed: see `WqeOperation`.
    pub trait Sealed {
        fn segments(&self) -> Segments;
    }
}

/// A SEND (`ibv_wr_send`, mlx5 opcode `MLX5_OPCODE_SEND`).
#[derive(Debug, Clone, Copy)]
pub struct Send {}

impl private::Sealed for Send {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x0a,
            name: "ibv_wr_send",
            immediate: None,
            remote: Remote::None,
        }
    }
}

impl WqeOperation for Send {}
impl InlineOperation for Send {}

/// A SEND with immediate data (`ibv_wr_send_imm`, `MLX5_OPCODE_SEND_IMM`).
#[derive(Debug, Clone, Copy)]
pub struct SendWithImmediate {
    pub(super) imm_data: u32,
}

impl private::Sealed for SendWithImmediate {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x0b,
            name: "ibv_wr_send_imm",
            immediate: Some(self.imm_data),
            remote: Remote::None,
        }
    }
}

impl WqeOperation for SendWithImmediate {}
impl InlineOperation for SendWithImmediate {}

/// An RDMA WRITE (`ibv_wr_rdma_write`, `MLX5_OPCODE_RDMA_WRITE`).
#[derive(Debug, Clone, Copy)]
pub struct Write {
    pub(super) rkey: u32,
    pub(super) remote_addr: u64,
}

impl private::Sealed for Write {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x08,
            name: "ibv_wr_rdma_write",
            immediate: None,
            remote: Remote::Memory {
                rkey: self.rkey,
                remote_addr: self.remote_addr,
            },
        }
    }
}

impl WqeOperation for Write {}
impl InlineOperation for Write {}

/// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`, `MLX5_OPCODE_RDMA_WRITE_IMM`).
#[derive(Debug, Clone, Copy)]
pub struct WriteWithImmediate {
    pub(super) rkey: u32,
    pub(super) remote_addr: u64,
    pub(super) imm_data: u32,
}

impl private::Sealed for WriteWithImmediate {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x09,
            name: "ibv_wr_rdma_write_imm",
            immediate: Some(self.imm_data),
            remote: Remote::Memory {
                rkey: self.rkey,
                remote_addr: self.remote_addr,
            },
        }
    }
}

impl WqeOperation for WriteWithImmediate {}
impl InlineOperation for WriteWithImmediate {}

/// An RDMA READ (`ibv_wr_rdma_read`, `MLX5_OPCODE_RDMA_READ`).
#[derive(Debug, Clone, Copy)]
pub struct Read {
    pub(super) rkey: u32,
    pub(super) remote_addr: u64,
}

impl private::Sealed for Read {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x10,
            name: "ibv_wr_rdma_read",
            immediate: None,
            remote: Remote::Memory {
                rkey: self.rkey,
                remote_addr: self.remote_addr,
            },
        }
    }
}

impl WqeOperation for Read {}

/// An atomic compare-and-swap (`ibv_wr_atomic_cmp_swp`, `MLX5_OPCODE_ATOMIC_CS`).
#[derive(Debug, Clone, Copy)]
pub struct AtomicCompareAndSwap {
    pub(super) rkey: u32,
    pub(super) remote_addr: u64,
    pub(super) compare: u64,
    pub(super) swap: u64,
}

impl private::Sealed for AtomicCompareAndSwap {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x11,
            name: "ibv_wr_atomic_cmp_swp",
            immediate: None,
            remote: Remote::Atomic {
                rkey: self.rkey,
                remote_addr: self.remote_addr,
                swap_add: self.swap,
                compare: Some(self.compare),
            },
        }
    }
}

impl WqeOperation for AtomicCompareAndSwap {}

/// An atomic fetch-and-add (`ibv_wr_atomic_fetch_add`, `MLX5_OPCODE_ATOMIC_FA`).
#[derive(Debug, Clone, Copy)]
pub struct AtomicFetchAndAdd {
    pub(super) rkey: u32,
    pub(super) remote_addr: u64,
    pub(super) add: u64,
}

impl private::Sealed for AtomicFetchAndAdd {
    #[inline]
    fn segments(&self) -> Segments {
        Segments {
            opcode: 0x12,
            name: "ibv_wr_atomic_fetch_add",
            immediate: None,
            remote: Remote::Atomic {
                rkey: self.rkey,
                remote_addr: self.remote_addr,
                swap_add: self.add,
                compare: None,
            },
        }
    }
}

impl WqeOperation for AtomicFetchAndAdd {}
