//! [`AddressCache`]: where an address handle's 48-byte address vector is, found once per handle
//! rather than by a library call per request.
//!
//! libmlx5's `mlx5_send_wr_set_dc_addr` reads the vector at a fixed place of its own
//! `struct mlx5_ah` (`to_mah(ah)->av`) at each call, and copies it into the WQE. That place is
//! what `mlx5dv_init_obj` with `MLX5DV_OBJ_AH` answers (`mlx5dv_get_av`: `&mah->av`). The cache
//! keeps that answer per `ibv_ah` pointer, asks on the first use of a pointer, and reads the
//! vector through it at every request, as libmlx5 does.
//!
//! What it caches is a place, not the bytes: an address handle destroyed and another created at
//! the same address (malloc reuses it) is a `struct mlx5_ah` at the same address, whose vector
//! is at the same place, read afresh. So a reused address gives the new handle's route, as in
//! libmlx5; the only hazard left is libmlx5's own, a pointer to a handle no longer alive.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_ah;
use sideway_ext::mlx5::direct_objects::address_handle_object;

use super::AddressVector;

/// Where the address vector of an address handle is, or `None` when it has none (not an mlx5
/// handle). Called with handles the caller of the DC setter promised alive; on a device,
/// [`AddressCache::device`]; the tests give their own.
pub(crate) type AddressLookup = Box<dyn Fn(NonNull<ibv_ah>) -> Option<NonNull<[u8; 48]>> + Send>;

/// The most handles remembered: past it, the cache starts again (and asks again), so that its
/// size stays bounded however many handles come and go.
const MOST_KNOWN: usize = 4096;

/// The places of the address vectors of the handles seen, and the last one used (a pool's batch
/// goes to one destination: every request after the first finds it there).
pub(crate) struct AddressCache {
    last: Option<(NonNull<ibv_ah>, NonNull<[u8; 48]>)>,
    known: HashMap<NonNull<ibv_ah>, NonNull<[u8; 48]>, BuildHasherDefault<PointerHasher>>,
    lookup: AddressLookup,
}

impl AddressCache {
    /// An empty cache asking `lookup`.
    pub(super) fn new(lookup: AddressLookup) -> Self {
        Self {
            last: None,
            known: HashMap::default(),
            lookup,
        }
    }

    /// The lookup of a device's handles: `mlx5dv_init_obj` with `MLX5DV_OBJ_AH`.
    pub(crate) fn device() -> AddressLookup {
        Box::new(|ah| {
            // SAFETY: the cache asks only for a handle its caller (the DC setter's) promised to be
            // a live address handle.
            let object = unsafe { address_handle_object(ah) }.ok()?;
            NonNull::new(object.av.cast())
        })
    }

    /// The address vector of `ah`, copied (as libmlx5 copies it at the setter's call).
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle of the lookup's kind (on a device, libmlx5's).
    #[inline]
    pub(super) unsafe fn read(&mut self, ah: NonNull<ibv_ah>) -> Option<AddressVector> {
        let place = match self.last {
            Some((last, place)) if last == ah => place,
            _ => self.find(ah)?,
        };
        // SAFETY: the place of a live handle's vector (the caller's promise, and the lookup's
        // answer for the handle at this address); 48 bytes, no alignment needed.
        Some(AddressVector::new(unsafe { place.read() }))
    }

    #[cold]
    fn find(&mut self, ah: NonNull<ibv_ah>) -> Option<NonNull<[u8; 48]>> {
        let place = match self.known.get(&ah) {
            Some(&place) => place,
            None => {
                let place = (self.lookup)(ah)?;
                if self.known.len() >= MOST_KNOWN {
                    self.known.clear();
                }
                self.known.insert(ah, place);
                place
            },
        };
        self.last = Some((ah, place));
        Some(place)
    }
}

/// A hash of a pointer: its bits above the alignment, multiplied by a 64-bit odd constant (the
/// golden ratio's), and the product's high half folded into its low half (which the table's
/// buckets use).
#[derive(Default)]
pub(super) struct PointerHasher(u64);

impl Hasher for PointerHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_usize(&mut self, address: usize) {
        self.0 = ((address as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}
