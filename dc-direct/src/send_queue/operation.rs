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

/// An operation type with the fields its builder was given, and the segments it puts in its
/// request.
macro_rules! operation {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $type:ty),* } => |$op:ident| $segments:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name {
            $(pub(super) $field: $type,)*
        }

        impl private::Sealed for $name {
            #[inline]
            fn segments(&self) -> Segments {
                let $op = self;
                $segments
            }
        }

        impl WqeOperation for $name {}
    };
}

operation! {
    /// A SEND (`ibv_wr_send`, mlx5 opcode `MLX5_OPCODE_SEND`).
    Send {} => |_op| Segments { opcode: 0x0a, name: "ibv_wr_send", immediate: None, remote: Remote::None }
}

operation! {
    /// A SEND with immediate data (`ibv_wr_send_imm`, `MLX5_OPCODE_SEND_IMM`).
    SendWithImmediate { imm_data: u32 } => |op| Segments {
        opcode: 0x0b, name: "ibv_wr_send_imm", immediate: Some(op.imm_data), remote: Remote::None,
    }
}

operation! {
    /// An RDMA WRITE (`ibv_wr_rdma_write`, `MLX5_OPCODE_RDMA_WRITE`).
    Write { rkey: u32, remote_addr: u64 } => |op| Segments {
        opcode: 0x08, name: "ibv_wr_rdma_write", immediate: None,
        remote: Remote::Memory { rkey: op.rkey, remote_addr: op.remote_addr },
    }
}

operation! {
    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`, `MLX5_OPCODE_RDMA_WRITE_IMM`).
    WriteWithImmediate { rkey: u32, remote_addr: u64, imm_data: u32 } => |op| Segments {
        opcode: 0x09, name: "ibv_wr_rdma_write_imm", immediate: Some(op.imm_data),
        remote: Remote::Memory { rkey: op.rkey, remote_addr: op.remote_addr },
    }
}

operation! {
    /// An RDMA READ (`ibv_wr_rdma_read`, `MLX5_OPCODE_RDMA_READ`).
    Read { rkey: u32, remote_addr: u64 } => |op| Segments {
        opcode: 0x10, name: "ibv_wr_rdma_read", immediate: None,
        remote: Remote::Memory { rkey: op.rkey, remote_addr: op.remote_addr },
    }
}

operation! {
    /// An atomic compare-and-swap (`ibv_wr_atomic_cmp_swp`, `MLX5_OPCODE_ATOMIC_CS`).
    AtomicCompareAndSwap { rkey: u32, remote_addr: u64, compare: u64, swap: u64 } => |op| Segments {
        opcode: 0x11, name: "ibv_wr_atomic_cmp_swp", immediate: None,
        remote: Remote::Atomic {
            rkey: op.rkey, remote_addr: op.remote_addr, swap_add: op.swap, compare: Some(op.compare),
        },
    }
}

operation! {
    /// An atomic fetch-and-add (`ibv_wr_atomic_fetch_add`, `MLX5_OPCODE_ATOMIC_FA`).
    AtomicFetchAndAdd { rkey: u32, remote_addr: u64, add: u64 } => |op| Segments {
        opcode: 0x12, name: "ibv_wr_atomic_fetch_add", immediate: None,
        remote: Remote::Atomic { rkey: op.rkey, remote_addr: op.remote_addr, swap_add: op.add, compare: None },
    }
}

impl InlineOperation for Send {}
impl InlineOperation for SendWithImmediate {}
impl InlineOperation for Write {}
impl InlineOperation for WriteWithImmediate {}
