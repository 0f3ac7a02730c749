//! The errors of the send queue.

/// Error returned by [`SendQueue::from_parts`](super::SendQueue::from_parts).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub struct CreateSendQueueError(#[from] pub CreateSendQueueErrorKind);

/// The enum type for [`CreateSendQueueError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateSendQueueErrorKind {
    /// The writer's barriers and stores are x86-64's alone.
    #[error("the direct writer is built and checked for x86-64 only, not {architecture}")]
    UnsupportedArchitecture {
        /// The architecture this was built for (`std::env::consts::ARCH`).
        architecture: &'static str,
    },
    /// Not `MLX5_SEND_WQE_BB`, what libmlx5 creates.
    #[error("send queue stride {stride} is not 64 bytes")]
    UnsupportedStride {
        /// The stride given.
        stride: u32,
    },
    /// libmlx5's `sq.wqe_cnt` always is.
    #[error("send queue WQE count {wqe_count} is not a power of two")]
    InvalidWqeCount {
        /// The count given.
        wqe_count: u32,
    },
    /// Not aligned as libmlx5 leaves it.
    #[error("the {part} is not aligned to {alignment} bytes")]
    Misaligned {
        /// Which part: `"send queue buffer"`, `"doorbell record"` or `"BlueFlame register"`.
        part: &'static str,
        /// The alignment it needs.
        alignment: usize,
    },
    /// 0: no BlueFlame.
    #[error("BlueFlame size {blueflame_size} is not 0 or a multiple of 64 up to 2048")]
    InvalidBlueFlameSize {
        /// The size given.
        blueflame_size: u32,
    },
    /// The queue pair number does not fit in 24 bits.
    #[error("queue pair number {qp_number:#x} does not fit in 24 bits")]
    InvalidQpNumber {
        /// The number given.
        qp_number: u32,
    },
    /// Zero `max_post`, or not one largest request fits (libmlx5 sizes the queue for `max_post`).
    #[error(
        "{max_post} requests of up to {max_inline_data} inline bytes or {max_send_sge} entries do not fit in \
         {wqe_count} WQE basic blocks"
    )]
    LimitsDoNotFit {
        /// The maximum number of outstanding requests given.
        max_post: u32,
        /// The inline limit given.
        max_inline_data: u32,
        /// The scatter/gather limit given.
        max_send_sge: u32,
        /// The queue's size in 64-byte basic blocks.
        wqe_count: u32,
    },
}

/// Error returned by a request's data step: nothing of the request was written; the batch goes on.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub struct WorkRequestError(#[from] pub WorkRequestErrorKind);

/// The enum type for [`WorkRequestError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkRequestErrorKind {
    /// `mlx5_wq_overflow`, checked after the request's own limits.
    #[error("the send queue is full: {max_post} requests outstanding")]
    QueueFull {
        /// The queue's maximum of outstanding requests.
        max_post: u32,
    },
    /// Longer than the granted `max_inline_data`.
    #[error("{length} bytes of inline data exceed the maximum of {max_inline_data}")]
    InlineDataTooLong {
        /// The data's length (all slices of a list together).
        length: usize,
        /// The granted maximum.
        max_inline_data: u32,
    },
    /// Zero-length ones count, as in libmlx5, which writes one on a queue granted none.
    #[error("{count} scatter/gather entries exceed the maximum of {max_send_sge}")]
    TooManyScatterGatherEntries {
        /// The number of entries given.
        count: usize,
        /// The granted maximum.
        max_send_sge: u32,
    },
    /// A stream id without DCI streams.
    #[error("DCI stream {stream_id} given to a DC initiator without streams")]
    StreamsNotEnabled {
        /// The stream id given.
        stream_id: u16,
    },
}
