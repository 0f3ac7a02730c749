//! What a completion settles, what an error completion fails or hands back for a retry, and when
//! an errored stream is reset or an initiator in ERR recovered.
//!
//! # Exactly once
//!
//! The pool signals every request (UCX turns completion moderation off for DC too), and in the
//! error state a queue pair completes every outstanding request with `IBV_WC_WR_FLUSH_ERR`,
//! signalled or not: each request gets a completion of its own. The pool reports a request on its
//! completion (or on a later one of the same stream, which completes in order), never by
//! inference: a successful completion is `Completed`, however late after another stream's error;
//! only a flushed request is `Retry` (or `Failed` for the destination at fault). A stream in error
//! is reset, and an initiator in ERR recovered, only once every request it held was reported:
//! resetting earlier would discard completions still in the CQ (`mlx5_cq_clean` at RESET) and
//! the man page asks for the flush first.
use rdma_mummy_sys::ibv_wc_status;

use super::destinations::PoolCore;
use super::initiator::{PooledInitiator, StreamResetRefusal};
use super::requests::{initiator_of, BatchRecord, LaneError, WrIds};
use super::types::{DcPoolEvent, DestinationId};

/// Whether an error status says the target is not there: no answer (transport retry counter
/// exceeded: ibv_poll_cq(3), "the remote side didn't send any Ack or Nack"; what UCX's DC
/// peer-failure test logs for a destroyed DCT, openucx/ucx#3679; and most likely a live DCT whose
/// DC key is not the one named, which mlx5 drops with a key-violation event at the target and no
/// NAK; no ConnectX has confirmed either for this crate), no receive ever (RNR retry counter
/// exceeded), or no such DC target (remote invalid request). Such a request fails (it may have
/// executed and its acknowledgement been lost: no retry), its initiator is recovered, and after
/// `unreachable_after` in a row the destination is unreachable. A remote access or remote
/// operation error is not counted: a NAK says a target answered (an rkey, or a DC key a target
/// NAKs rather than drops).
pub(crate) fn is_no_such_target(status: u32) -> bool {
    matches!(
        status,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR
            | ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR
            | ibv_wc_status::IBV_WC_REM_INV_REQ_ERR
    )
}

impl<I: PooledInitiator> PoolCore<I> {
    /// Settles a completion of the provider-visible `wr_id` with `status` (an `ibv_wc_status`)
    /// and its vendor syndrome (carried by the failing request's [`DcPoolEvent::Failed`]),
    /// reporting every request it settles to `sink`. A completion that names no request in
    /// flight is ignored; returns whether it named one.
    pub(crate) fn complete(
        &mut self, wr_ids: &WrIds, wr_id: u64, status: u32, vendor_err: u32, sink: &mut impl FnMut(DcPoolEvent),
    ) -> bool {
        let initiator = initiator_of(wr_id);
        let Some(requests) = self.requests.get(initiator) else {
            return false;
        };
        let number = requests.unwrap_number(wr_id);
        let Some((_, batch)) = requests.find(number) else {
            return false;
        };
        if status == ibv_wc_status::IBV_WC_SUCCESS {
            self.settle_up_to(wr_ids, initiator, batch.stream, number + 1, sink);
        } else {
            self.fail(wr_ids, initiator, number, batch, (status, vendor_err), sink);
        }
        // Mostly none waits or retires: tested here, not in a call.
        let requests = &self.requests[initiator];
        let (retiring, blocked) = (!requests.retiring.is_empty(), !requests.blocked.is_empty());
        if retiring {
            self.remove_retired(initiator);
        }
        if blocked {
            self.unblock(initiator);
        }
        self.report_ready(sink);
        true
    }

    /// Reports as completed the requests of `initiator`'s stream `lane` before `end` (a stream
    /// completes in order: they executed).
    #[inline(always)]
    fn settle_up_to(
        &mut self, wr_ids: &WrIds, initiator: usize, lane: u16, end: u64, sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let requests = &mut self.requests[initiator];
        // The ring's size is a power of two.
        let ring = wr_ids.ring(initiator);
        let mask = ring.len() as u64 - 1;
        let mut reported = 0;
        // Walked by index: mostly one record, where an iterator's set-up costs more than the walk.
        let mut k = 0;
        while let Some(batch) = requests.batches.get_mut(k) {
            k += 1;
            if batch.first >= end {
                break;
            }
            let stop = batch.end.min(end);
            if batch.stream != lane || batch.settled >= stop {
                continue;
            }
            let state = &mut self.destinations[batch.destination as usize];
            let destination = DestinationId {
                index: batch.destination,
                generation: state.generation,
            };
            state.retries_exceeded = 0;
            for number in batch.settled..stop {
                let wr_id = ring[(number & mask) as usize];
                sink(DcPoolEvent::Completed { destination, wr_id });
            }
            reported += stop - batch.settled;
            batch.settled = stop;
        }
        requests.reported += reported;
        requests.pop_settled();
        // Only this stream's requests were settled: only it (or the whole initiator) may now
        // hold nothing and be ready for its reset.
        if requests.whole_error || requests.lanes[lane as usize].errored {
            self.maybe_recover(initiator, sink);
        }
        self.release_holder_if_idle(initiator);
    }

    /// A completion in error of request `number` (in `batch`) of `initiator`: an error
    /// completion, or a flush.
    fn fail(
        &mut self, wr_ids: &WrIds, initiator: usize, number: u64, batch: BatchRecord, (status, vendor_err): (u32, u32),
        sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let lane = batch.stream;
        if status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            let requests = &mut self.requests[initiator];
            if !requests.lanes[lane as usize].errored {
                // A flush no error completion of its stream announced: the whole initiator went
                // to ERR (on its own, or after 2^`log_num_errored` stream errors).
                requests.whole_error = true;
            }
            self.flush_up_to(wr_ids, initiator, lane, number + 1, sink);
        } else {
            // Requests of its stream before it executed.
            self.settle_up_to(wr_ids, initiator, lane, number, sink);
            let d = batch.destination;
            let destination = self.id(d);
            let unreachable_after = self.unreachable_after;
            let state = &mut self.destinations[d as usize];
            if !is_no_such_target(status) {
                state.retries_exceeded = 0;
            } else {
                state.retries_exceeded += 1;
                if state.retries_exceeded >= unreachable_after && !state.unreachable {
                    state.unreachable = true;
                    sink(DcPoolEvent::Unreachable { destination });
                }
            }
            let requests = &mut self.requests[initiator];
            sink(DcPoolEvent::Failed {
                destination,
                wr_id: wr_ids.ring(initiator)[requests.slot(number)],
                status,
                vendor_err,
            });
            if let Some((index, _)) = requests.find(number) {
                requests.batches[index].settled = number + 1;
                requests.reported += 1;
            }
            requests.lanes[lane as usize] = LaneError {
                errored: true,
                at_fault: Some(d),
            };
            if requests.streams == 0 {
                // Without streams an error completion puts the initiator in ERR.
                requests.whole_error = true;
            }
            requests.pop_settled();
        }
        self.maybe_recover(initiator, sink);
        self.release_holder_if_idle(initiator);
    }

    /// Reports the requests of `initiator`'s stream `lane` before `end` as flushed: failed for the
    /// destination at fault on that stream (or an unreachable one), handed back otherwise.
    fn flush_up_to(
        &mut self, wr_ids: &WrIds, initiator: usize, lane: u16, end: u64, sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let requests = &mut self.requests[initiator];
        let at_fault = requests.lanes[lane as usize].at_fault;
        // The ring's size is a power of two.
        let ring = wr_ids.ring(initiator);
        let mask = ring.len() as u64 - 1;
        let mut reported = 0;
        for batch in requests.batches.iter_mut() {
            if batch.first >= end {
                break;
            }
            let stop = batch.end.min(end);
            if batch.stream != lane || batch.settled >= stop {
                continue;
            }
            let state = &self.destinations[batch.destination as usize];
            let destination = DestinationId {
                index: batch.destination,
                generation: state.generation,
            };
            let fails = at_fault == Some(batch.destination) || state.unreachable;
            for number in batch.settled..stop {
                let wr_id = ring[(number & mask) as usize];
                sink(if fails {
                    DcPoolEvent::Failed {
                        destination,
                        wr_id,
                        status: ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
                        vendor_err: 0,
                    }
                } else {
                    DcPoolEvent::Retry { destination, wr_id }
                });
            }
            reported += stop - batch.settled;
            batch.settled = stop;
        }
        requests.reported += reported;
        requests.pop_settled();
    }

    /// Resets an errored stream once it holds nothing, or recovers an initiator in ERR once it
    /// holds nothing.
    fn maybe_recover(&mut self, initiator: usize, sink: &mut impl FnMut(DcPoolEvent)) {
        let requests = &mut self.requests[initiator];
        if requests.out_of_service {
            return;
        }
        if !requests.whole_error {
            for lane in 0..requests.lanes.len() as u16 {
                let requests = &self.requests[initiator];
                if !requests.lanes[lane as usize].errored || !requests.lane_idle(lane) {
                    continue;
                }
                match self.initiators[initiator].reset_stream(lane) {
                    Ok(()) => self.requests[initiator].lanes[lane as usize] = LaneError::default(),
                    // It went to ERR as a whole (or cannot reset streams): recovered below once
                    // everything it holds was reported.
                    Err(StreamResetRefusal::NotReadyToSend | StreamResetRefusal::Failed(_)) => {
                        self.requests[initiator].whole_error = true;
                        break;
                    },
                }
            }
        }
        let requests = &self.requests[initiator];
        if requests.whole_error && requests.outstanding() == 0 {
            match self.initiators[initiator].recover() {
                Ok(()) => {
                    let requests = &mut self.requests[initiator];
                    requests.whole_error = false;
                    requests.lanes.iter_mut().for_each(|l| *l = LaneError::default());
                },
                Err(error) => {
                    // It holds nothing: out of service.
                    self.take_out_of_service(initiator);
                    sink(DcPoolEvent::InitiatorLost {
                        initiator,
                        error: error.to_string(),
                    });
                },
            }
        }
    }
}
