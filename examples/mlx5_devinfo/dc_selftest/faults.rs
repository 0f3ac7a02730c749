//! The self-test's fault steps, each on the mlx5 loopback only (the self-test stops before its
//! steps on any other device): a wrong DC key, a destroyed DC target and an errored DCI stream.
//! Each reports the error completion it got ([`Fault`]: status, vendor syndrome, time from post
//! to completion) with its verdict, and brings the DC initiator back for the next step.
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::WorkCompletionStatus;
use sideway::ibverbs::queue_pair::{QueuePairState, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DciStreams};

use super::{success, write, write_into, written, Loopback, Result, KEY, LEN};
use crate::fault::Fault;

/// A step's verdict and the error completion it got, if it got that far.
pub type Outcome = (Result<String>, Option<Fault>);

/// A write with a wrong DC key fails, the DC initiator goes to ERR, `recover` brings it back and a
/// write with the right key arrives.
pub fn wrong_key(lb: &mut Loopback, dci: &mut DcInitiator) -> Outcome {
    let mut fault = None;
    let result = (|| {
        let start = Instant::now();
        let error = write(lb, dci, KEY ^ 1, None, 6)?;
        fault = Some(Fault::new(&error, start.elapsed()));
        if success(&error).is_ok() {
            return Err("a write with a wrong DC key succeeded".into());
        }
        let recovery = to_error_and_back(dci)?;
        success(&write(lb, dci, KEY, None, 8)?)?;
        written(lb, 8)?;
        Ok(format!(
            "error {:?}, then {recovery:?} and a write that arrived",
            error.status()
        ))
    })();
    (result, fault)
}

/// A DC target is reached, destroyed, and written to by its old number: a "no such target"
/// error ([`destroyed_target_verdict`]), the DC initiator in ERR, `recover`, and a write to the
/// loopback's own target arrives.
pub fn destroyed_target(lb: &mut Loopback, dci: &mut DcInitiator) -> Outcome {
    let mut fault = None;
    let result = (|| {
        let (dct, endpoint) = lb.recipe.build()?;
        let number = endpoint.dct_number();
        let to_number = |lb: &mut Loopback, dci: &mut DcInitiator, seed: u8| {
            lb.local.write(0, &super::pattern(LEN, seed));
            lb.one(dci, KEY, None, |lb, guard, key, _| {
                // SAFETY: the local buffer lies in its memory region and outlives the request.
                unsafe {
                    guard
                        .construct_wr(u64::from(seed), WorkRequestFlags::Signaled)
                        .setup_write(lb.remote.mr.rkey(), lb.remote.addr(0))
                        .setup_dc_addr(&lb.ah, number, key)
                        .setup_sge(lb.local.mr.lkey(), lb.local.addr(0), LEN as u32)
                }
            })
        };
        success(&to_number(lb, dci, 13)?).map_err(|e| format!("the second DC target, while alive: {e}"))?;
        written(lb, 13)?;
        drop(dct);
        let start = Instant::now();
        let error = to_number(lb, dci, 14)?;
        fault = Some(Fault::new(&error, start.elapsed()));
        destroyed_target_verdict(error.status())?;
        let recovery = to_error_and_back(dci)?;
        success(&write(lb, dci, KEY, None, 15)?)?;
        written(lb, 15)?;
        Ok(format!(
            "DCT number {number:#x} reached, destroyed: {:?}, then {recovery:?} and a write that arrived",
            error.status()
        ))
    })();
    (result, fault)
}

/// A DC initiator with 2 streams, 2 of which may be in error: a write on stream 1 into memory
/// without remote write fails and leaves the initiator in RTS ([`errored_stream_verdict`]),
/// stream 0 goes on, and stream 1, reset, is used again. `built` receives the DC initiator
/// (for its grant in the report).
pub fn errored_stream(lb: &mut Loopback, built: &mut Option<DcInitiator>) -> Outcome {
    let mut fault = None;
    let result = (|| {
        let streams = DciStreams {
            log_num_concurrent: 1,
            log_num_errored: 1,
        };
        let dci = built.insert(lb.initiator(Some(streams))?);
        let start = Instant::now();
        let wc = write_into(lb, dci, KEY, Some(1), 9, true)?;
        fault = Some(Fault::new(&wc, start.elapsed()));
        let state = dci.query_state().map_err(|e| format!("query: {}", crate::chain(&e)))?;
        let seen = errored_stream_verdict(&[wc.status()], state)
            .map_err(|why| format!("a write on stream 1 into memory without remote write: {why}"))?;
        // Other streams go on (man page mlx5dv_dci_stream_id_reset(3)).
        success(&write(lb, dci, KEY, Some(0), 11)?).map_err(|e| format!("stream 0: {e}"))?;
        // Stream 1 had nothing else queued, so nothing is left to flush: reset it now, as
        // pyverbs does right after the error.
        dci.reset_stream(1)
            .map_err(|e| format!("reset stream 1: {}", crate::chain(&e)))?;
        success(&write(lb, dci, KEY, Some(1), 12)?).map_err(|e| format!("stream 1 after its reset: {e}"))?;
        written(lb, 12)?;
        Ok(format!(
            "stream 1: {seen}; stream 0 went on; stream 1 reset and used again"
        ))
    })();
    (result, fault)
}

/// Waits for the DC initiator's move to ERR after an error completion, and recovers it.
fn to_error_and_back(dci: &mut DcInitiator) -> Result<sideway_ext::mlx5::dc::initiator::DcRecovery> {
    let state = dci
        .wait_for_error(Duration::from_secs(1))
        .map_err(|e| format!("query: {}", crate::chain(&e)))?;
    if state != QueuePairState::Error {
        return Err(format!("after the error the DC initiator is {state:?}, not ERR"));
    }
    dci.recover().map_err(|e| format!("recover: {}", crate::chain(&e)))
}

/// What a request to a destroyed DC target may complete with: the statuses the pool counts as
/// "no such target" (`is_no_such_target`); UCX sees retry exceeded (openucx/ucx#3679). A remote
/// access or operation error would mean a live target answered.
fn destroyed_target_verdict(status: Option<WorkCompletionStatus>) -> Result<()> {
    match status {
        Some(
            WorkCompletionStatus::RetryCounterExceededError
            | WorkCompletionStatus::ResponderNotReadyRetryCounterExceededError
            | WorkCompletionStatus::RemoteInvalidRequestError,
        ) => Ok(()),
        other => Err(format!(
            "the destroyed DC target answered {other:?}: a \"no such target\" status expected (retry exceeded, \
             RNR retry exceeded or remote invalid request)"
        )),
    }
}

/// The streams check's verdict on an errored stream, from what it saw: the statuses of the
/// stream's completions from its error on (`seen`, the error first) and the DC initiator's state
/// read right after the error. It requires what mlx5dv_dci_stream_id_reset(3) guarantees: the
/// request failed with its own cause (not as flushed), and the DC initiator stayed in RTS (one
/// errored stream; 2 would move it to ERR). It reports the statuses, whatever they are: no reference
/// promises one error status, nor `WR_FLUSH_ERR` for the stream's later requests (only rdma-core
/// commit 82166bcc's message says so; pyverbs resets the stream right after its error).
fn errored_stream_verdict(seen: &[Option<WorkCompletionStatus>], state: QueuePairState) -> Result<String> {
    match seen.first() {
        None => return Err("no completion of the errored stream".into()),
        Some(Some(WorkCompletionStatus::Success)) => return Err("the request meant to fail succeeded".into()),
        Some(Some(WorkCompletionStatus::WorkRequestFlushedError)) => {
            return Err("the failed request was flushed instead of carrying its cause".into())
        },
        Some(_) => {},
    }
    if state != QueuePairState::ReadyToSend {
        return Err(format!(
            "after one stream's error the DC initiator is {state:?}, not RTS"
        ));
    }
    Ok(format!(
        "the stream's completions {seen:?} left the DC initiator in {state:?}"
    ))
}

#[cfg(test)]
mod tests {
    use sideway::ibverbs::completion::WorkCompletionStatus::*;
    use sideway::ibverbs::queue_pair::QueuePairState;

    use super::{destroyed_target_verdict, errored_stream_verdict};

    #[test]
    fn an_errored_stream_needs_its_error_and_rts_only_and_its_statuses_are_reported() {
        let rts = QueuePairState::ReadyToSend;
        // Whatever error the device gives, with nothing after it: no flush is required.
        for error in [RemoteAccessError, RemoteInvalidRequestError, LocalProtectionError] {
            let verdict = errored_stream_verdict(&[Some(error)], rts).expect("the man page's promise holds");
            assert!(verdict.contains(&format!("{error:?}")), "{verdict}");
        }
        // Later completions of the stream are reported, flushed or not.
        let verdict = errored_stream_verdict(&[Some(RemoteAccessError), Some(WorkRequestFlushedError)], rts);
        assert!(verdict.expect("reported").contains("WorkRequestFlushedError"));
        // What the man page does promise.
        assert!(errored_stream_verdict(&[Some(Success)], rts).is_err());
        assert!(errored_stream_verdict(&[Some(WorkRequestFlushedError)], rts).is_err());
        assert!(errored_stream_verdict(&[], rts).is_err());
        let err = errored_stream_verdict(&[Some(RemoteAccessError)], QueuePairState::Error).unwrap_err();
        assert!(err.contains("not RTS"), "{err}");
    }

    #[test]
    fn a_destroyed_target_is_any_no_such_target_status_and_nothing_a_live_one_answers() {
        for status in [
            RetryCounterExceededError,
            ResponderNotReadyRetryCounterExceededError,
            RemoteInvalidRequestError,
        ] {
            assert_eq!(destroyed_target_verdict(Some(status)), Ok(()), "{status:?}");
        }
        for status in [
            Success,
            RemoteAccessError,
            RemoteOperationError,
            WorkRequestFlushedError,
        ] {
            assert!(destroyed_target_verdict(Some(status)).is_err(), "{status:?}");
        }
        assert!(destroyed_target_verdict(None).is_err());
    }
}
