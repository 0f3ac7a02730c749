//! The barriers and MMIO stores of libmlx5's doorbell (`post_send_db` and `mlx5_bf_copy` in
//! `providers/mlx5/qp.c`), for x86-64 as rdma-core defines them in `util/udma_barrier.h` and
//! `util/mmio.h`:
//!
//! | rdma-core, and the [`Hardware`] method of the same name | x86-64 |
//! |---|---|
//! | `udma_to_device_barrier()` | compiler barrier only |
//! | `udma_from_device_barrier()` | `lfence` |
//! | `mmio_flush_writes()` | `sfence` |
//! | `mmio_wc_start()` (= `mmio_flush_writes()`) | `sfence` |
//! | `mmio_write64_be()` | one 8-byte store |
//! | `mmio_memcpy_x64(dst, src, 64)` | eight 8-byte stores, ascending |
//!
//! Every barrier is also a compiler barrier (the C macros' `"memory"` clobber: an `asm!` without
//! `nomem`). `mmio_wc_spinlock` is not here: libmlx5 takes it only for a BlueFlame register it
//! shares between queue pairs, and a direct writer owns its register.
use std::ptr::NonNull;

/// The one architecture the doorbell's barriers and stores are written for.
pub(crate) const ARCHITECTURE: &str = "x86_64";

/// Refuses every `architecture` (a `std::env::consts::ARCH`) but [`ARCHITECTURE`], naming it.
pub(crate) fn check_architecture(architecture: &'static str) -> Result<(), &'static str> {
    match architecture {
        ARCHITECTURE => Ok(()),
        other => Err(other),
    }
}

/// The barriers and stores of the CPU this runs on (x86-64; none elsewhere).
#[derive(Debug)]
pub(crate) struct Hardware {
    #[cfg(not(target_arch = "x86_64"))]
    never: std::convert::Infallible,
    _private: (),
}

impl Hardware {
    /// The hardware barriers and stores, or `None` on another architecture.
    pub(crate) fn new() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        return Some(Self { _private: () });
        #[cfg(not(target_arch = "x86_64"))]
        return None;
    }

    /// `mmio_wc_start()`: orders what came before ahead of the write-combining stores that follow.
    #[inline]
    pub(crate) fn mmio_wc_start(&mut self) {
        self.mmio_flush_writes()
    }

    /// `mmio_write64_be(register + offset, bytes)`: one 8-byte store of `bytes` as they are.
    ///
    /// # Safety
    ///
    /// `register + offset` must be 8-byte aligned and writable for 8 bytes.
    #[inline]
    pub(crate) unsafe fn mmio_write64_be(&mut self, register: NonNull<u8>, offset: usize, bytes: [u8; 8]) {
        // SAFETY: the caller's promise: aligned and writable. A volatile aligned u64 store is one
        // 8-byte store, as mmio.h's relaxed atomic store.
        unsafe {
            register
                .add(offset)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(bytes))
        }
    }

    /// `mmio_memcpy_x64(register + offset, source, 64)`: the 64 bytes at `source`, stored ascending.
    ///
    /// # Safety
    ///
    /// `register + offset` must be 64-byte aligned and writable for 64 bytes, `source` 8-byte
    /// aligned and readable for 64 bytes.
    #[inline]
    pub(crate) unsafe fn mmio_memcpy_x64(&mut self, register: NonNull<u8>, offset: usize, source: NonNull<u8>) {
        let source = source.cast::<u64>();
        // SAFETY: the caller's promise: the 64 bytes from register + offset are writable.
        let destination = unsafe { register.add(offset) }.cast::<u64>();
        // mmio_memcpy_x64's generic case: eight mmio_write64_be, ascending.
        for word in 0..8 {
            // SAFETY: the caller's promise: both ranges are aligned and 64 bytes long.
            unsafe { destination.add(word).write_volatile(source.add(word).read()) }
        }
    }
}

/// The barriers themselves: x86-64's instructions.
#[cfg(target_arch = "x86_64")]
impl Hardware {
    /// `udma_to_device_barrier()`: the device sees the CPU's stores to its queues before any that follow.
    #[inline]
    pub(crate) fn udma_to_device_barrier(&mut self) {
        // SAFETY: an empty instruction; without `nomem` it is the compiler barrier
        // `asm volatile("" ::: "memory")` of udma_barrier.h's x86-64 case.
        unsafe { std::arch::asm!("", options(nostack, preserves_flags)) }
    }

    /// `udma_from_device_barrier()`: reads after it see what the device stored before a store the CPU saw.
    #[inline]
    pub(crate) fn udma_from_device_barrier(&mut self) {
        // SAFETY: `lfence` only orders loads; no register or memory operand.
        unsafe { std::arch::asm!("lfence", options(nostack, preserves_flags)) }
    }

    /// `mmio_flush_writes()`: flushes the write-combining stores made so far.
    #[inline]
    pub(crate) fn mmio_flush_writes(&mut self) {
        // SAFETY: `sfence` only orders stores; no register or memory operand.
        unsafe { std::arch::asm!("sfence", options(nostack, preserves_flags)) }
    }
}

/// Elsewhere there is no `Hardware` to call them on.
#[cfg(not(target_arch = "x86_64"))]
impl Hardware {
    pub(crate) fn udma_to_device_barrier(&mut self) {
        match self.never {}
    }

    pub(crate) fn udma_from_device_barrier(&mut self) {
        match self.never {}
    }

    pub(crate) fn mmio_flush_writes(&mut self) {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;

    use super::*;

    #[repr(C, align(64))]
    struct Page([u8; 256]);

    /// The hardware stores land in (plain) memory as they are, at their offsets.
    #[test]
    fn hardware_stores_write_the_bytes_at_their_offsets() {
        let Some(mut hardware) = Hardware::new() else {
            panic!("x86-64 has hardware barriers; this test runs elsewhere");
        };
        let mut register = Page([0; 256]);
        let source: [u64; 8] = std::array::from_fn(|word| 0x0101_0101_0101_0101 * (word as u64 + 1));
        let base = NonNull::from(&mut register.0).cast::<u8>();
        hardware.udma_to_device_barrier();
        hardware.mmio_wc_start();
        // SAFETY: the page is 64-byte aligned and 256 bytes long; the source is 64 bytes.
        unsafe {
            hardware.mmio_write64_be(base, 8, [0xaa; 8]);
            hardware.mmio_memcpy_x64(base, 128, NonNull::from(&source).cast());
        }
        hardware.mmio_flush_writes();
        hardware.udma_from_device_barrier();
        assert_eq!(register.0[..8], [0; 8]);
        assert_eq!(register.0[8..16], [0xaa; 8]);
        assert!(register.0[16..128].iter().all(|&byte| byte == 0));
        for word in 0..8 {
            assert_eq!(
                register.0[128 + 8 * word..136 + 8 * word],
                [word as u8 + 1; 8],
                "word {word}"
            );
        }
        assert!(register.0[192..].iter().all(|&byte| byte == 0));
    }

    /// Every architecture but x86-64 is refused, by name, aarch64 included (its libmlx5 copies
    /// BlueFlame with NEON, or ST64B since rdma-core 63; never compiled here); the hardware
    /// exists exactly where the check passes.
    #[test]
    fn every_architecture_but_x86_64_is_refused_by_name() {
        assert_eq!(check_architecture("x86_64"), Ok(()));
        for architecture in ["aarch64", "arm", "powerpc64", "riscv64", "s390x", "x86"] {
            assert_eq!(check_architecture(architecture), Err(architecture));
        }
        assert_eq!(
            Hardware::new().is_some(),
            check_architecture(std::env::consts::ARCH).is_ok()
        );
    }
}
