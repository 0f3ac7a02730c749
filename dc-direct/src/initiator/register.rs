//! The BlueFlame registers live direct initiators write, so that a second one on the same
//! register is refused
//! ([`BlueFlameRegisterShared`](super::CreateDirectDcInitiatorErrorKind::BlueFlameRegisterShared)):
//! each would toggle the register's halves on its own, where libmlx5 and UCX keep one toggle per
//! register. Why a direct initiator must own its register, and how libmlx5 hands registers out,
//! is the crate documentation's "The BlueFlame register". Doorbell registers (`bf.size` 0) are
//! not claimed: libmlx5 writes those from any queue pair, unlocked, never toggling.
use std::sync::Mutex;

/// The BlueFlame registers of the live direct initiators, by address.
static CLAIMED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A BlueFlame register one direct initiator writes; released when dropped.
#[derive(Debug)]
pub(crate) struct RegisterClaim(usize);

impl RegisterClaim {
    /// Claims the register at `register` (a `bf.reg`), unless a live direct initiator has.
    pub(crate) fn claim(register: usize) -> Option<Self> {
        // A panic while the lock was held left the list as it was: its entries are still right.
        let mut claimed = CLAIMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if claimed.contains(&register) {
            return None;
        }
        claimed.push(register);
        Some(Self(register))
    }
}

impl Drop for RegisterClaim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        claimed.retain(|&register| register != self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::RegisterClaim;

    #[test]
    fn a_register_is_claimed_once_until_its_claim_is_dropped() {
        // Addresses no other test claims (claims are process-wide).
        let (first, second) = (0xdead_0000_0800, 0xdead_0000_0900);
        let claim = RegisterClaim::claim(first).expect("a free register");
        assert!(RegisterClaim::claim(first).is_none(), "claimed twice");
        let other = RegisterClaim::claim(second).expect("another register is free");
        drop(claim);
        let again = RegisterClaim::claim(first).expect("free again once dropped");
        drop((again, other));
    }
}
