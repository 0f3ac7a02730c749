//! Who else writes a DC initiator's BlueFlame register, and what this crate refuses.
//!
//! `mlx5dv_qp` gives the register (`bf.reg`) and each half's size (`bf.size`), not whether
//! libmlx5 shares it with other queue pairs or locks it (`struct mlx5_bf`'s `need_lock`, private).
//! What rdma-core 55 does (`providers/mlx5/verbs.c`, `mlx5.c`):
//!
//! - `create_qp` takes a queue pair's register from its thread domain when its protection domain
//!   is a parent domain with one (`mlx5_attach_dedicated_uar`: one register for every queue pair
//!   of the domain, which libmlx5 writes without a lock, trusting the domain's single thread),
//!   else from `mlx5_get_qp_uar`: a dedicated register for each of the first
//!   `qp_max_dedicated_uuars` queue pairs of a device context (the low-latency ones:
//!   `MLX5_NUM_LOW_LAT_UUARS`, 4 by default, `get_num_low_lat_uuars`, counted in whole UAR
//!   pages by `mlx5_insert_dyn_uuars`; given back when the queue pair is destroyed,
//!   `mlx5_put_qp_uar`), then registers shared by several queue pairs, the least used first
//!   (`qp_shared`, `need_lock` set unless `MLX5_SINGLE_THREADED=1`; `MLX5_TOTAL_UUARS` sizes
//!   the pool). Before the kernel allocated registers dynamically, `need_uuar_lock` made the same
//!   split over the context's fixed `bfs[]`.
//! - With `MLX5_SHUT_UP_BF` set (or no write-combining), every queue pair gets the context's one
//!   non-cached register (`ctx->nc_uar`), `bf.size` 0: the doorbell alone, the halves never
//!   toggled, no lock (`need_uuar_lock`: "the one in index zero does not exercise odd/even
//!   policy so it can avoid a lock but it may not use blue flame").
//! - The lock (`mmio_wc_spinlock` in `post_send_db`) covers the whole write, BlueFlame copy or
//!   doorbell, and the toggle of the half (`bf->offset`), which lives in `struct mlx5_bf`, one
//!   for all the queue pairs of a register.
//!
//! UCX (`src/uct/ib/mlx5/ib_mlx5.c`, `uct_ib_mlx5_txwq_init` and `uct_ib_mlx5_get_mmio_mode`)
//! creates its queue pairs on a thread domain of its own per worker
//! (`uct_ib_mlx5_res_domain_init`) and only then writes BlueFlame; without one it rings the
//! doorbell alone under a lock (`UCT_IB_MLX5_MMIO_MODE_DB_LOCK`); and it keeps one toggle per
//! register for the queue pairs sharing it (`uct_ib_mlx5_mmio_reg_t`, found by the register's
//! address).
//!
//! This crate's writer takes no lock and keeps its own toggle, so it must own the register:
//!
//! - A register of `bf.size` 0 needs nothing: libmlx5 writes it the same way, from any queue
//!   pair, without a lock. [`DirectDcInitiator::new`](super::DirectDcInitiator::new) takes only
//!   these (run with `MLX5_SHUT_UP_BF=1`).
//! - A BlueFlame register (`bf.size` > 0) is taken by the `unsafe`
//!   [`DirectDcInitiator::new_with_blueflame`](super::DirectDcInitiator::new_with_blueflame),
//!   whose caller promises that no queue pair posted through libmlx5 writes it meanwhile: no
//!   other queue pair of the device context posts while the direct initiator lives, or every one
//!   that does holds a dedicated register (at most `MLX5_NUM_LOW_LAT_UUARS` queue pairs on the
//!   context, direct initiators included). Two direct initiators on one register would each
//!   toggle its halves: the second is refused here
//!   ([`BlueFlameRegisterShared`](super::CreateDirectDcInitiatorErrorKind::BlueFlameRegisterShared)),
//!   for as long as the first lives. A pool of more direct initiators than dedicated registers
//!   raises `MLX5_NUM_LOW_LAT_UUARS` (with `MLX5_TOTAL_UUARS`, which must exceed it), or runs
//!   with `MLX5_SHUT_UP_BF=1`.
//!
//! None of this has run on a ConnectX: what the device makes of two writers on one register
//! without the lock is not known here, hence the refusals.
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
