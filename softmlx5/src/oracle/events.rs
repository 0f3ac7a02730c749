//! What libmlx5 does to the device besides writing host memory, in order: the barriers of
//! rdma-core's `util/udma_barrier.h` by name, and the MMIO stores of `util/mmio.h`, recorded by
//! the stand-ins in `c/record/` (per thread).
use super::ffi;

/// A barrier macro of rdma-core's `util/udma_barrier.h`, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Barrier {
    /// `udma_to_device_barrier()`.
    ToDevice,
    /// `udma_from_device_barrier()`.
    FromDevice,
    /// `mmio_flush_writes()`.
    FlushWrites,
    /// `mmio_wc_start()`.
    WcStart,
    /// `mmio_wc_spinlock()`.
    WcSpinlock,
    /// `mmio_wc_spinunlock()`.
    WcSpinunlock,
}

/// One thing libmlx5 did to the device, in the order it did them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MmioEvent {
    /// A barrier.
    Barrier(Barrier),
    /// An 8-byte store to the BlueFlame/doorbell register: its offset from the register page's
    /// start (the layout's `blueflame`) and the bytes as stored.
    Store {
        /// Bytes from the register page's start.
        offset: usize,
        /// The 8 bytes, in memory order.
        bytes: [u8; 8],
    },
}

/// The events this thread recorded since the last call, with stores' offsets from `register`;
/// a store outside `register .. register + register_len` (the CQ's doorbell, say) keeps its
/// offset from `register` too, as a wrapped difference, and narrower stores panic: the mlx5 post
/// and poll paths issue none.
pub(crate) fn take_events(register: *const u8) -> Vec<MmioEvent> {
    // SAFETY: the recorder's array holds oracle_events_len() events of this thread, and nothing
    // else runs on this thread while it is read.
    let events = unsafe {
        let len = ffi::oracle_events_len();
        let events = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(ffi::oracle_events(), len)
        };
        let taken = events.iter().map(|event| convert(event, register)).collect();
        ffi::oracle_events_clear();
        taken
    };
    events
}

fn convert(event: &ffi::EventC, register: *const u8) -> MmioEvent {
    match event.kind {
        0 => MmioEvent::Barrier(Barrier::ToDevice),
        1 => MmioEvent::Barrier(Barrier::FromDevice),
        2 => MmioEvent::Barrier(Barrier::FlushWrites),
        3 => MmioEvent::Barrier(Barrier::WcStart),
        4 => MmioEvent::Barrier(Barrier::WcSpinlock),
        5 => MmioEvent::Barrier(Barrier::WcSpinunlock),
        6 => {
            assert_eq!(event.len, 8, "libmlx5 stored {} bytes to the device", event.len);
            MmioEvent::Store {
                offset: event.addr.wrapping_sub(register as usize),
                bytes: event.bytes,
            }
        },
        kind => panic!("unknown event kind {kind}"),
    }
}
