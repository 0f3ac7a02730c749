//! mlx5 DC initiators that write their own work queue entries (WQEs) into the send queue
//! libmlx5 created, ring the doorbell as libmlx5 does, and poll their own completions, built on
//! sideway-ext's public API.
//!
//! Nothing of this has run on a ConnectX yet.

mod barrier;
pub mod send_queue;

/// Stand-in for sideway-ext-wqe-oracle's event types until the oracle lands (the contract's).
#[cfg(test)]
mod oracle_stub {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum MmioEvent {
        Barrier(Barrier),
        Store { offset: usize, bytes: [u8; 8] },
    }
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[allow(dead_code)]
    pub enum Barrier {
        ToDevice,
        FromDevice,
        FlushWrites,
        WcStart,
        WcSpinlock,
        WcSpinunlock,
    }
}
