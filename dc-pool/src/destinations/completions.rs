//! What a completion settles, what an error completion fails or hands back for a retry, and when
//! an errored stream is reset or an initiator in ERR recovered: only once every request it held
//! was reported (a reset discards completions still in the CQ, `mlx5_cq_clean` at RESET, and the
//! man page asks for the flush first). In the error state a queue pair completes every
//! outstanding request with `IBV_WC_WR_FLUSH_ERR`, signalled or not.
use rdma_mummy_sys::ibv_wc_status;

use super::{Place, PoolCore};
use crate::initiator::{PoolCompletion, PoolInitiator, StreamResetRefusal};
use crate::requests::{initiator_of, Health, Record, Run};
use crate::types::{DcPoolEvent, DestinationId};

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
fn is_no_such_target(status: u32) -> bool {
    matches!(
        status,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR
            | ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR
            | ibv_wc_status::IBV_WC_REM_INV_REQ_ERR
    )
}

/// Reports `run`, requests of the destination at place `d`, as completed.
#[inline]
fn completed(
    places: &mut [Place], retiring_settled: &mut Vec<u32>, d: u32, run: Run<'_>, sink: &mut impl FnMut(DcPoolEvent),
) {
    let place = &mut places[d as usize];
    let destination = DestinationId::new(d, place.generation);
    if let Some(live) = place.destination.as_mut() {
        live.answered();
        if live.retiring {
            retiring_settled.push(d);
        }
    }
    for wr_id in run {
        sink(DcPoolEvent::Completed { destination, wr_id });
    }
}

impl PoolCore {
    /// Settles `completion`, reporting every request it settles to `sink`; returns whether it
    /// named a request in flight on its initiator's queue pair (one that names none is ignored).
    pub(crate) fn complete<I: PoolInitiator>(
        &mut self, initiators: &mut [I], wr_ids: &[u64], completion: PoolCompletion, sink: &mut impl FnMut(DcPoolEvent),
    ) -> bool {
        let wr_id = completion.wr_id();
        let initiator = initiator_of(wr_id);
        let Self {
            requests,
            places,
            retiring_settled,
            ..
        } = self;
        let Some(requests) = requests.get_mut(initiator) else {
            return false;
        };
        let Some(number) = requests.number_of(completion.qp_number(), wr_id) else {
            return false;
        };
        let status = completion.status();
        let d = if status == ibv_wc_status::IBV_WC_SUCCESS {
            let Some((d, in_error)) = requests.settle_through(wr_ids, number, |d, run| {
                completed(places, retiring_settled, d, run, sink)
            }) else {
                return false;
            };
            // Only this stream (or the whole initiator) may now hold nothing and need its reset.
            if in_error {
                self.maybe_recover(initiators, initiator, sink);
            }
            d
        } else {
            let Some(batch) = requests.find(number) else {
                return false;
            };
            self.fail(
                wr_ids,
                initiator,
                number,
                batch,
                (status, completion.vendor_err()),
                sink,
            );
            self.maybe_recover(initiators, initiator, sink);
            batch.destination()
        };
        // A held initiator carries only its holder's requests; only dedicated policies hold.
        if self.settings.policy().is_dedicated() {
            self.release_if_idle(d, initiator);
        }
        // Mostly none retires or waits: tested here, not in a call.
        if !self.retiring_settled.is_empty() {
            self.remove_retired();
        }
        if self.requests[initiator].has_blocked() {
            self.unblock(initiator);
        }
        self.report_ready(sink);
        true
    }

    /// Reports as completed the requests of `initiator`'s stream `lane` before `end`.
    fn settle_up_to(
        &mut self, wr_ids: &[u64], initiator: usize, lane: u16, end: u64, sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let Self {
            requests,
            places,
            retiring_settled,
            ..
        } = self;
        requests[initiator].settle(wr_ids, lane, end, |d, run| {
            completed(places, retiring_settled, d, run, sink);
        });
    }

    /// An error completion, or a flush, of request `number` (in `batch`) of `initiator`.
    fn fail(
        &mut self, wr_ids: &[u64], initiator: usize, number: u64, batch: Record, (status, vendor_err): (u32, u32),
        sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let lane = batch.stream();
        if status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            self.flush_up_to(wr_ids, initiator, lane, number + 1, sink);
            return;
        }
        // Requests of its stream before it executed.
        self.settle_up_to(wr_ids, initiator, lane, number, sink);
        let d = batch.destination();
        let destination = self.id(d);
        let unreachable_after = self.settings.unreachable_after().max(1);
        let live = self.at(d);
        if !is_no_such_target(status) {
            live.answered();
        } else if live.not_answered(unreachable_after) {
            sink(DcPoolEvent::Unreachable { destination });
        }
        if live.retiring {
            self.retiring_settled.push(d);
        }
        let wr_id = self.requests[initiator].fail(wr_ids, number, d, lane);
        sink(DcPoolEvent::Failed {
            destination,
            wr_id,
            status,
            vendor_err,
        });
    }

    /// Reports the requests of `initiator`'s stream `lane` before `end` as flushed: failed for the
    /// destination at fault on that stream (or an unreachable one), handed back otherwise.
    fn flush_up_to(
        &mut self, wr_ids: &[u64], initiator: usize, lane: u16, end: u64, sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let Self {
            requests,
            places,
            retiring_settled,
            ..
        } = self;
        requests[initiator].flush(wr_ids, lane, end, |d, run, at_fault| {
            let place = &places[d as usize];
            let destination = DestinationId::new(d, place.generation);
            let live = place.destination.as_ref();
            if live.is_some_and(|l| l.retiring) {
                retiring_settled.push(d);
            }
            let fails = at_fault || live.is_some_and(|l| l.is_unreachable());
            for wr_id in run {
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
        });
    }

    /// Resets an errored stream, or recovers an initiator in ERR, once it holds nothing.
    fn maybe_recover<I: PoolInitiator>(
        &mut self, initiators: &mut [I], initiator: usize, sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let requests = &mut self.requests[initiator];
        if requests.health() == Health::OutOfService {
            return;
        }
        if requests.health() == Health::InService {
            for lane in 0..requests.lane_count() as u16 {
                if !requests.lane_needs_reset(lane) {
                    continue;
                }
                match initiators[initiator].reset_stream(lane) {
                    Ok(()) => requests.lane_reset(lane),
                    // It went to ERR as a whole (or cannot reset streams): recovered below once
                    // everything it holds was reported.
                    Err(StreamResetRefusal::NotReadyToSend | StreamResetRefusal::Failed(_)) => {
                        requests.enter_error();
                        break;
                    },
                }
            }
        }
        if !requests.ready_to_recover() {
            return;
        }
        match initiators[initiator].recover() {
            Ok(()) => requests.recovered(initiators[initiator].qp_number()),
            Err(error) => {
                self.take_out_of_service(initiator);
                sink(DcPoolEvent::InitiatorLost {
                    initiator,
                    error: error.to_string(),
                });
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use rdma_mummy_sys::ibv_wc_status;

    use super::is_no_such_target;

    /// The statuses a ConnectX may return for a DC target that is not there: the pool counts the
    /// first two towards "unreachable", not the third (a remote access error is also a wrong key),
    /// nor a flush.
    #[test]
    fn the_statuses_of_a_missing_target_are_counted_as_the_pool_counts_them() {
        assert!(is_no_such_target(ibv_wc_status::IBV_WC_RETRY_EXC_ERR));
        assert!(is_no_such_target(ibv_wc_status::IBV_WC_REM_INV_REQ_ERR));
        assert!(!is_no_such_target(ibv_wc_status::IBV_WC_REM_ACCESS_ERR));
        assert!(!is_no_such_target(ibv_wc_status::IBV_WC_WR_FLUSH_ERR));
    }
}
