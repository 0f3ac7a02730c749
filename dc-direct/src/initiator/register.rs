//! The register a direct initiator rings ([`DirectRegister`]) and the claims that keep a second
//! direct initiator off a BlueFlame register it writes: each would toggle the register's halves on
//! its own, where libmlx5 and UCX keep one toggle per register. Doorbell registers (`bf.size` 0)
//! are not claimed: libmlx5 writes those from any queue pair, unlocked, never toggling.
use std::sync::Mutex;

use sideway_ext::mlx5::device_attributes::Mlx5ContextFlags;

use super::CreateDirectDcInitiatorErrorKind;

/// The register a [`DirectDcInitiator`](super::DirectDcInitiator) rings, and why it needs no libmlx5 lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirectRegister {
    /// The register of the DC initiator's own thread domain, which libmlx5 gives no other queue
    /// pair; a doorbell register (`blueflame_size` 0) on a device without BlueFlame.
    ThreadDomain {
        /// Each half's size (`bf.size`); 0: a doorbell register.
        blueflame_size: u32,
    },
    /// A doorbell register (`bf.size` 0) of a DC initiator without a thread domain.
    Doorbell,
    /// A BlueFlame register of a DC initiator without a thread domain, taken on the promise of
    /// [`new_with_blueflame`](super::DirectDcInitiator::new_with_blueflame)'s caller.
    Promised {
        /// Each half's size (`bf.size`).
        blueflame_size: u32,
    },
}

/// Whether a BlueFlame register without a thread domain is taken: only on its owner's promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlueFlame {
    /// No promise: a thread domain's register or a doorbell register only.
    Refused,
    /// The caller promised the register is this queue pair's alone.
    Owned,
}

impl DirectRegister {
    /// The register of a DC initiator on a thread domain of its own or not, with halves of
    /// `blueflame_size` bytes, with or without its owner's promise; else
    /// [`BlueFlameRegisterNotOwned`](CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned).
    pub(crate) fn of(
        thread_domain: bool, blueflame_size: u32, blueflame: BlueFlame,
    ) -> Result<Self, CreateDirectDcInitiatorErrorKind> {
        match (thread_domain, blueflame_size, blueflame) {
            (true, _, _) => Ok(Self::ThreadDomain { blueflame_size }),
            (false, 0, _) => Ok(Self::Doorbell),
            (false, _, BlueFlame::Owned) => Ok(Self::Promised { blueflame_size }),
            (false, _, BlueFlame::Refused) => {
                Err(CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned { blueflame_size })
            },
        }
    }

    /// Each half's size (`bf.size`): 0 for a doorbell register, rung with the doorbell word alone.
    pub fn blueflame_size(self) -> u32 {
        match self {
            Self::ThreadDomain { blueflame_size } | Self::Promised { blueflame_size } => blueflame_size,
            Self::Doorbell => 0,
        }
    }

    /// Whether the device has BlueFlame registers: `Some(true)` when `mlx5dv_query_device`'s
    /// [`BlueFlame`](Mlx5ContextFlags::BlueFlame) flag (rdma-core 58 and later) or the register
    /// says so; `Some(false)` for a thread domain's register without halves (`mlx5_alloc_td`
    /// gives one with halves wherever they exist); `None` when neither tells.
    pub fn blueflame_exists(self, flags: Mlx5ContextFlags) -> Option<bool> {
        match self {
            _ if flags.contains(Mlx5ContextFlags::BlueFlame) => Some(true),
            Self::ThreadDomain { blueflame_size } => Some(blueflame_size > 0),
            Self::Promised { .. } => Some(true),
            Self::Doorbell => None,
        }
    }
}

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
    use sideway_ext::mlx5::device_attributes::Mlx5ContextFlags;

    use super::{BlueFlame, CreateDirectDcInitiatorErrorKind, DirectRegister, RegisterClaim};

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

    /// The safe constructor takes a thread domain's register whatever its size (a BlueFlame
    /// register on a kernel without dynamic UAR allocation included, where `MLX5_SHUT_UP_BF`
    /// leaves every other register's halves), a doorbell register, and refuses any other
    /// BlueFlame register; the promise takes it.
    #[test]
    fn a_thread_domain_or_doorbell_register_is_taken_and_another_blueflame_one_only_on_a_promise() {
        use DirectRegister::*;
        for promise in [BlueFlame::Refused, BlueFlame::Owned] {
            for blueflame_size in [0, 256, 2048] {
                assert_eq!(
                    DirectRegister::of(true, blueflame_size, promise).unwrap(),
                    ThreadDomain { blueflame_size }
                );
            }
            assert_eq!(DirectRegister::of(false, 0, promise).unwrap(), Doorbell);
        }
        assert!(matches!(
            DirectRegister::of(false, 256, BlueFlame::Refused),
            Err(CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned { blueflame_size: 256 })
        ));
        assert_eq!(
            DirectRegister::of(false, 256, BlueFlame::Owned).unwrap(),
            Promised { blueflame_size: 256 }
        );
        let sizes = [
            ThreadDomain { blueflame_size: 256 },
            ThreadDomain { blueflame_size: 0 },
            Doorbell,
        ]
        .map(DirectRegister::blueflame_size);
        assert_eq!(sizes, [256, 0, 0]);
        assert_eq!(Promised { blueflame_size: 512 }.blueflame_size(), 512);
    }

    /// BlueFlame exists where libmlx5 says so (rdma-core 58 and later) or a register shows it;
    /// a thread domain's register without halves says it does not; a doorbell register without a
    /// thread domain and a clear flag (which an older libmlx5 never sets) say nothing.
    #[test]
    fn whether_blueflame_exists_comes_from_the_flag_or_a_register_that_shows_it() {
        use DirectRegister::*;
        let (reported, clear) = (
            Mlx5ContextFlags::BlueFlame | Mlx5ContextFlags::CqeV1,
            Mlx5ContextFlags::CqeV1,
        );
        for register in [
            ThreadDomain { blueflame_size: 0 },
            Doorbell,
            Promised { blueflame_size: 256 },
        ] {
            assert_eq!(register.blueflame_exists(reported), Some(true), "{register:?}");
        }
        assert_eq!(ThreadDomain { blueflame_size: 256 }.blueflame_exists(clear), Some(true));
        assert_eq!(Promised { blueflame_size: 256 }.blueflame_exists(clear), Some(true));
        assert_eq!(ThreadDomain { blueflame_size: 0 }.blueflame_exists(clear), Some(false));
        assert_eq!(Doorbell.blueflame_exists(clear), None);
    }
}
