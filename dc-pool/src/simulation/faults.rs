//! Faults scheduled at a tick of the simulated fabric: the faults a test scripts through the
//! targets' and initiators' handles (kill a target, change its key, stall an initiator, move it
//! to ERR, fail its next request, refuse its recoveries), made when the fabric reaches the tick.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};

use super::fabric::Fabric;
use super::initiator::SimulatedInitiator;
use super::request::{FLUSH, SUCCESS};
use super::target::SimulatedTarget;
use super::trace::SimulatedEvent;
use super::Shared;

/// A fault for [`SimulatedFabric::schedule`](super::SimulatedFabric::schedule): what the handle
/// method of the same name does, made at a tick of the fabric's clock. It belongs to the fabric
/// of the handle it was made from.
#[derive(Debug, Clone)]
pub struct SimulatedFault {
    fabric: Weak<RefCell<Fabric>>,
    fault: Fault,
}

impl PartialEq for SimulatedFault {
    fn eq(&self, other: &Self) -> bool {
        self.fault == other.fault && self.fabric.ptr_eq(&other.fabric)
    }
}

impl Eq for SimulatedFault {}

/// The faults, by the fabric's index of the target or initiator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill { target: usize },
    Revive { target: usize },
    SetDcKey { target: usize, dc_key: u64 },
    Stall { initiator: usize, ticks: u64 },
    MoveToError { initiator: usize },
    FailNext { initiator: usize, stream: u16, status: u32 },
    RefuseRecovery { initiator: usize, refuse: bool },
}

impl SimulatedFault {
    /// [`SimulatedTarget::kill`]: nothing answers the target any more.
    pub fn kill(target: &SimulatedTarget) -> Self {
        let (fabric, target) = target.place();
        Self::new(fabric, Fault::Kill { target })
    }

    /// [`SimulatedTarget::revive`]: it answers again.
    pub fn revive(target: &SimulatedTarget) -> Self {
        let (fabric, target) = target.place();
        Self::new(fabric, Fault::Revive { target })
    }

    /// [`SimulatedTarget::set_dc_key`]: its DC key changes.
    pub fn set_dc_key(target: &SimulatedTarget, dc_key: u64) -> Self {
        let (fabric, target) = target.place();
        Self::new(fabric, Fault::SetDcKey { target, dc_key })
    }

    /// [`SimulatedInitiator::stall`]: the initiator executes nothing for `ticks` ticks from the
    /// fault's.
    pub fn stall(initiator: &SimulatedInitiator, ticks: u64) -> Self {
        let (fabric, initiator) = initiator.place();
        Self::new(fabric, Fault::Stall { initiator, ticks })
    }

    /// [`SimulatedInitiator::move_to_error`]: it goes to ERR.
    pub fn move_to_error(initiator: &SimulatedInitiator) -> Self {
        let (fabric, initiator) = initiator.place();
        Self::new(fabric, Fault::MoveToError { initiator })
    }

    /// [`SimulatedInitiator::fail_next`]: its next request to execute on `stream` ends with
    /// `status` (success or a flush: nothing).
    pub fn fail_next(initiator: &SimulatedInitiator, stream: u16, status: u32) -> Self {
        let (fabric, initiator) = initiator.place();
        Self::new(
            fabric,
            Fault::FailNext {
                initiator,
                stream,
                status,
            },
        )
    }

    /// [`SimulatedInitiator::refuse_recovery`]: its recoveries fail while `refuse` holds.
    pub fn refuse_recovery(initiator: &SimulatedInitiator, refuse: bool) -> Self {
        let (fabric, initiator) = initiator.place();
        Self::new(fabric, Fault::RefuseRecovery { initiator, refuse })
    }

    fn new(fabric: &Shared, fault: Fault) -> Self {
        Self {
            fabric: Rc::downgrade(fabric),
            fault,
        }
    }
}

/// Error returned by [`SimulatedFabric::schedule`](super::SimulatedFabric::schedule).
#[derive(Debug, thiserror::Error)]
#[error("failed to schedule a simulated fault")]
#[non_exhaustive]
pub struct ScheduleFaultError(#[from] pub ScheduleFaultErrorKind);

/// Why a fault was not scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleFaultErrorKind {
    /// It was made from a handle of another fabric.
    #[error("the fault belongs to another simulated fabric")]
    OtherFabric,
}

/// The faults waiting for their tick, by (tick, order of scheduling).
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    due: BTreeMap<(u64, u64), SimulatedFault>,
    scheduled: u64,
}

impl Schedule {
    /// `fault` is made at `tick` on `fabric`, if it is one of its.
    pub(crate) fn add(fabric: &Shared, tick: u64, fault: SimulatedFault) -> Result<(), ScheduleFaultError> {
        if !fault.fabric.ptr_eq(&Rc::downgrade(fabric)) {
            return Err(ScheduleFaultErrorKind::OtherFabric.into());
        }
        let schedule = &mut fabric.borrow_mut().schedule;
        schedule.scheduled += 1;
        schedule.due.insert((tick, schedule.scheduled), fault);
        Ok(())
    }
}

impl Fabric {
    /// Makes the faults due by now, in the order they were scheduled: at the start of the tick,
    /// before any request runs in it.
    pub(crate) fn apply_due_faults(&mut self) {
        let now = self.now();
        while let Some(entry) = self.schedule.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let fault = entry.remove();
            self.apply(fault.fault);
            self.trace.record(|| SimulatedEvent::Fault { tick: now, fault });
        }
    }

    fn apply(&mut self, fault: Fault) {
        match fault {
            Fault::Kill { target } => self.targets[target].alive = false,
            Fault::Revive { target } => self.targets[target].alive = true,
            Fault::SetDcKey { target, dc_key } => self.targets[target].dc_key = dc_key,
            Fault::Stall { initiator, ticks } => self.stall(initiator, ticks),
            Fault::MoveToError { initiator } => self.move_to_error(initiator),
            Fault::FailNext {
                initiator,
                stream,
                status,
            } => {
                if status != SUCCESS && status != FLUSH {
                    self.fail_next(initiator, stream, status);
                }
            },
            Fault::RefuseRecovery { initiator, refuse } => self.initiators[initiator].refuse_recovery = refuse,
        }
    }
}
