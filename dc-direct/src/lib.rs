//! mlx5 DC initiators that write their own work queue entries (WQEs) into the send queue
//! libmlx5 created, ring the doorbell and poll their own completions as libmlx5 does, without
//! its four indirect calls a request; built on sideway-ext's public API. Opt-in, and not yet
//! run on a ConnectX.
//!
//! # A direct DC initiator
//!
//! Take over a sideway CQ's polling with [`DirectCompletionQueue::new`]; build a [`DcInitiator`]
//! completing into it, on a thread domain of its own, and make it direct before its bring-up.
//! After an error completion, poll them all, then [`recover`](DirectDcInitiator::recover).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use sideway::ibverbs::completion::GenericCompletionQueue;
//! use sideway::ibverbs::protection_domain::ProtectionDomain;
//! use sideway::ibverbs::queue_pair::WorkRequestFlags;
//! use sideway_ext::ibverbs::address_handle::AddressHandle;
//! use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
//! use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
//! use sideway_ext::mlx5::extension::DcProtectionDomainExt;
//! use sideway_ext_dc_direct::completion_queue::Completion;
//! use sideway_ext_dc_direct::send_queue::AddressVector;
//! use sideway_ext_dc_direct::{DirectCompletionQueue, DirectDcInitiator};
//!
//! /// Writes the 64 bytes at `local` (registered under `lkey`) to `remote` (under `rkey`) at the
//! /// DC target of `endpoint`, reached through `ah`, and sends it 16 bytes inline.
//! fn write_and_send(
//!     pd: &Arc<ProtectionDomain>, cq: GenericCompletionQueue, ah: &AddressHandle, endpoint: &DcEndpoint,
//!     (lkey, local): (u32, u64), (rkey, remote): (u32, u64),
//! ) -> Result<(), Box<dyn std::error::Error>> {
//!     // SAFETY: nothing else polls `cq`; only direct initiators complete into it.
//!     let mut direct_cq = unsafe { DirectCompletionQueue::new(cq.clone()) }?;
//!     let mut builder = pd.create_dci_builder();
//!     // On a thread domain of its own: a register no other queue pair writes.
//!     builder.setup_send_cq(cq).setup_max_send_wr(64);
//!     let mut dci = DirectDcInitiator::new(builder.build_on_thread_domain()?, &direct_cq)?;
//!     dci.bring_up(&DcInitiatorBringUp::new(1))?;
//!     let av = AddressVector::from_address_handle(ah)?;
//!     // One target (else `start_post_send`, and `setup_dc_addr` after each operation).
//!     let mut guard = dci.start_post_send_to(&av, endpoint.dct_number(), endpoint.dc_key(), None);
//!     let write = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_write(rkey, remote);
//!     // SAFETY: the 64 bytes at `local` are registered under `lkey` and outlive the request.
//!     unsafe { write.setup_sge(lkey, local, 64) }?;
//!     guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send().setup_inline_data(&[7; 16])?;
//!     guard.post();
//!
//!     let mut completions = [Completion::default(); 8];
//!     let mut done = 0;
//!     while done < 2 {
//!         let polled = direct_cq.poll(&mut completions)?;
//!         for completion in &completions[..polled] {
//!             assert_eq!(completion.wr_id(), done + 1, "{:?}", completion.status());
//!             done += 1;
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Several direct initiators may share one [`DirectCompletionQueue`]; dropping them and it in any
//! order is sound. All of it is single-threaded (neither `Send` nor `Sync`); neither posting nor
//! polling allocates.
//!
//! # A pool of direct initiators
//!
//! With the feature `pool`, [`DirectDcInitiator`] and [`DirectCompletionQueue`] implement
//! sideway-ext-dc-pool's initiator traits (`from_initiators`). Unlike a pool on libmlx5: a
//! request is answered at its data step (`post` cannot fail); the direct CQ cannot be armed for
//! events (`mlx5_arm_cq` would use libmlx5's stale consumer index); a completion of another queue
//! pair fails `poll` (a [`PollDirectCompletionQueueError`](completion_queue::PollDirectCompletionQueueError)
//! inside sideway's error) instead of `OtherCompletion`; on a kernel that cannot reset a DC
//! initiator, recovery reports it lost.
#![cfg_attr(
    feature = "pool",
    doc = r##"
```no_run
# use std::sync::Arc;
# use sideway::ibverbs::completion::GenericCompletionQueue;
# use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use sideway_ext::mlx5::dc::endpoint::{DcEndpoint, DcServiceClass};
use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_direct::{DirectCompletionQueue, DirectDcInitiator};
use sideway_ext_dc_pool::{settings::DcPoolSettings, types::DcPoolEvent, DcInitiatorPool};

# fn pool(pd: &Arc<ProtectionDomain>, cq: GenericCompletionQueue, endpoint: DcEndpoint, (lkey, local): (u32, u64), (rkey, remote): (u32, u64)) -> Result<(), Box<dyn std::error::Error>> {
// SAFETY: nothing polls `cq` but the pool, through the direct CQ.
let direct_cq = unsafe { DirectCompletionQueue::new(cq.clone()) }?;
let bring_up = DcInitiatorBringUp::new(1);
let mut initiators = Vec::new();
for _ in 0..4 {
    let mut dci = DirectDcInitiator::new(
        pd.create_dci_builder().setup_send_cq(cq.clone()).build_on_thread_domain()?,
        &direct_cq,
    )?;
    dci.bring_up(&bring_up)?;
    initiators.push(dci);
}
let mut settings = DcPoolSettings::default();
settings.setup_protection_domain(pd, bring_up.port(), DcServiceClass::new());
let mut pool = DcInitiatorPool::from_initiators(initiators, Some(direct_cq), &settings)?;
let destination = pool.add_destination(endpoint);
let mut guard = pool.start_post_send(destination)?;
let write = guard.construct_wr(1, WorkRequestFlags::Signaled)?.setup_write(rkey, remote);
// SAFETY: the 64 bytes at `local` are registered under `lkey` and outlive the request.
unsafe { write.setup_sge(lkey, local, 64) }?;
guard.post()?;
while pool.poll(|event| assert!(matches!(event, DcPoolEvent::Completed { wr_id: 1, .. })))? == 0 {}
# Ok(()) }
```
"##
)]
//!
//! # What is proven, and what is not
//!
//! The unit tests run libmlx5's own `qp.c` and `cq.c` (rdma-core 55), compiled over plain memory
//! (softmlx5's oracle, a test tool), next to this crate's writer and poller:
//!
//! - the writer ([`send_queue`]): for over a million random requests of every supported shape,
//!   the same send queue bytes, doorbell-record words, BlueFlame register contents and toggle,
//!   posting index, `wr_id`s;
//! - the poller ([`completion_queue`]): for random CQEs (success, every error syndrome, owner
//!   bits across passes), the same completions, consumer index and doorbell record as
//!   `mlx5_poll_cq`;
//! - the sharing of one CQ by several send queues: every `wr_id` back in order, room back,
//!   stray completions refused without moving anything.
//!
//! The order of the writer's stores and barriers cannot be seen in memory: it is read from
//! rdma-core, not tested; nor what write-combining buffers and PCIe make of them. None of this
//! has run on a ConnectX (the `mlx5_hw_` tests and `mlx5_devinfo --dc-selftest` are there for
//! when one is at hand).
//!
//! # The CPU: x86-64 only
//!
//! The doorbell is rdma-core's x86-64 sequence; aarch64's is another (`dmb`/`dsb`, a NEON or
//! ST64B copy). Elsewhere a direct initiator or CQ is refused (`UnsupportedArchitecture`).
//!
//! # What is refused
//!
//! The error kinds list it. Not refused: an RDMA READ longer than the initiator's path MTU from a
//! target whose path MTU is larger (its responses are dropped: `RETRY_EXC`), as sideway-ext's DC
//! guard does not refuse it (a DC pool does, `ReadResponsesTooLarge`): check sideway-ext-dc-pool's
//! `PathMtus::read_fits` before a READ.
//!
//! # The BlueFlame register
//!
//! This writer takes no lock and toggles the halves of its register on its own, so it must own
//! it: a DC initiator on a thread domain of its own, which the direct initiator then holds until
//! after the queue pair (`build_on_thread_domain`, taken as an [`OwnedDcInitiator`];
//! [`ThreadDomain`](sideway_ext::ibverbs::thread_domain::ThreadDomain) says why, from libmlx5's
//! `create_qp`; no ConnectX has confirmed it here), or any doorbell register (`bf.size` 0).
//! [`DirectDcInitiator::new`] refuses any other BlueFlame register
//! ([`BlueFlameRegisterNotOwned`](CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned));
//! the `unsafe` [`new_with_blueflame`](DirectDcInitiator::new_with_blueflame) takes one on its
//! caller's promise.
//!
//! [`DcInitiator`]: sideway_ext::mlx5::dc::initiator::DcInitiator

mod barrier;
pub mod completion_queue;
mod initiator;
pub mod send_queue;

pub use completion_queue::DirectCompletionQueue;
pub use initiator::{
    CreateDirectDcInitiatorError, CreateDirectDcInitiatorErrorKind, DirectBatch, DirectDcInitiator, DirectRegister,
    OwnedDcInitiator, RecoverDirectDcInitiatorError, RecoverDirectDcInitiatorErrorKind,
};
