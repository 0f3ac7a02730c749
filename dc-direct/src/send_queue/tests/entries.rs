//! sideway-ext's guards over the C entries against the same guards over libmlx5: for random
//! requests of every shape the writer supports, posted through the DC guard
//! (`PostSendGuard<DynamicallyConnected>`, as a DC initiator posts) and through guards of one
//! address per batch (`PostSendGuard<BatchAddressed<_>>`, as sideway-ext-dc-pool posts), both
//! leave the same send queue, `wr_id`s, doorbell record, BlueFlame register and offset, posting
//! index, and barriers and stores; and refuse the same batches with the same errors.
use rand::rngs::SmallRng;
use rand::Rng;
use sideway::ibverbs::queue_pair::SendOperationFlags;
use sideway_ext::ibverbs::post_send_guard::PostSendErrorKind;
use sideway_ext::mlx5::dc::initiator::{DcAddress, DcStreamAddress};
use sideway_ext_wqe_oracle::MmioEvent;

use super::entries_pair::{
    batch_len, inline_crosses_end, post_batch_addressed, post_dc_guard, rng, EntriesPair, Shape, ALL_OPERATIONS,
};
use super::requests::{sge, Op, Operations, Payload, Request};

/// What a run saw, so that a run that skipped a case fails instead of passing.
#[derive(Debug, Default)]
struct Seen {
    requests: u64,
    batches_of_one: u64,
    batches_of_sixteen: u64,
    blueflame_writes: u64,
    doorbell_writes: u64,
    index_wraps: u64,
    inline_split_at_end: u64,
    /// Batches refused by the guard before either provider, and by both providers.
    refused_by_guard: u64,
    refused_by_provider: u64,
}

impl Seen {
    /// Counts a batch both posted: `before` the posting index it started at.
    fn posted(&mut self, pair: &EntriesPair, batch: &[Request], before: u32, events: &[MmioEvent]) {
        let wqe_count = pair.libmlx5.layout().wqe_count;
        for (request, start) in batch.iter().zip(pair.starts(before, batch.len())) {
            self.inline_split_at_end += u64::from(inline_crosses_end(request, start, wqe_count));
        }
        self.requests += batch.len() as u64;
        self.batches_of_one += u64::from(batch.len() == 1);
        self.batches_of_sixteen += u64::from(batch.len() == 16);
        let stores = events
            .iter()
            .filter(|event| matches!(event, MmioEvent::Store { .. }))
            .count();
        self.blueflame_writes += u64::from(stores > 1);
        self.doorbell_writes += u64::from(stores == 1);
        self.index_wraps += u64::from(before & 0xffff > pair.libmlx5.posting_index() & 0xffff);
    }

    /// Batches of 1 and 16, BlueFlame and doorbell, inline data split at the queue's end, and
    /// the 16-bit index wrapping when `wraps` (a run posting 2^16 blocks).
    fn assert_every_case(&self, wraps: bool) {
        assert!(self.batches_of_one > 0 && self.batches_of_sixteen > 0, "{self:?}");
        assert!(self.blueflame_writes > 0 && self.doorbell_writes > 0, "{self:?}");
        assert!(
            self.inline_split_at_end > 0 && (self.index_wraps > 0 || !wraps),
            "{self:?}"
        );
    }
}

const SHAPES: [Shape; 6] = [
    (16, 0, 1, false, false, 256),
    (64, 220, 4, true, true, 256),
    (256, 60, 6, false, true, 0),
    (32, 200, 16, true, false, 256),
    (16, 100, 2, false, true, 256),
    (64, 12, 0, true, false, 0),
];

#[test]
fn the_dc_guard_over_the_entries_leaves_what_it_leaves_over_libmlx5() {
    let mut rng = rng(0x5eed_e001);
    let mut seen = Seen::default();
    let mut wr_id = 0;
    for (run, shape) in SHAPES.into_iter().enumerate() {
        let mut pair = EntriesPair::new(shape, Operations::All, ALL_OPERATIONS, &mut rng);
        let max_post = pair.libmlx5.max_post();
        let max_inline_data = Some(pair.libmlx5.max_inline_data());
        let mut posted = 0;
        while posted < 40_000 {
            let batch: Vec<Request> = (0..batch_len(&mut rng, max_post))
                .map(|_| {
                    wr_id += 1;
                    pair.draw.request(&mut rng, wr_id)
                })
                .collect();
            let context = || format!("run {run} ({shape:?}), after {posted} requests");
            let before = pair.libmlx5.posting_index();
            let libmlx5 = post_dc_guard(pair.libmlx5_views(), max_inline_data, &pair.routes, &batch);
            let direct = post_dc_guard(pair.direct_views(), max_inline_data, &pair.routes, &batch);
            assert!(
                libmlx5.is_ok() && direct.is_ok(),
                "{}: {libmlx5:?} {direct:?}",
                context()
            );
            let events = pair.compare(&context);
            seen.posted(&pair, &batch, before, &events);
            pair.retire(&context);
            posted += batch.len();
        }
    }
    assert!(seen.requests >= 200_000, "{seen:?}");
    seen.assert_every_case(true);
}

/// A fault planted in a batch, and the error both must report.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A READ on a DCI created without it: refused by the guard.
    NotGranted,
    /// A stream id on a DCI without streams: refused by the guard.
    StreamWithoutStreams,
    /// One scatter/gather entry more than granted: `ENOMEM` from the provider.
    TooManyEntries,
    /// One inline byte more than granted, the guard not told the limit: `ENOMEM`.
    InlineTooLong,
    /// More requests than the queue holds: `ENOMEM` (`mlx5_wq_overflow`).
    QueueFull,
}

fn plant(fault: Fault, batch: &mut Vec<Request>, pair: &EntriesPair, rng: &mut SmallRng, wr_id: &mut u64) {
    let at = rng.random_range(0..batch.len());
    let request = &mut batch[at];
    match fault {
        Fault::NotGranted => {
            request.op = Op::Read(rng.random(), rng.random());
            request.payload = Payload::SgeList((0..pair.draw.max_send_sge).map(|_| sge(rng)).collect());
        },
        Fault::StreamWithoutStreams => request.stream_id = Some(rng.random()),
        Fault::TooManyEntries => {
            request.payload = Payload::SgeList((0..=pair.draw.max_send_sge).map(|_| sge(rng)).collect());
        },
        Fault::InlineTooLong => {
            request.op = Op::Send;
            request.payload = Payload::Inline(vec![0x5a; pair.draw.max_inline_data as usize + 1]);
        },
        Fault::QueueFull => {
            let over = pair.libmlx5.max_post() as usize + rng.random_range(1..4);
            while batch.len() < over {
                *wr_id += 1;
                let mut request = pair.draw.request(rng, *wr_id);
                if let Op::Read(rkey, addr) = request.op {
                    request.op = Op::Write(rkey, addr);
                }
                batch.push(request);
            }
        },
    }
}

#[test]
fn refusals_and_errors_are_libmlx5s_and_refused_operations_never_reach_the_entries() {
    let mut rng = rng(0x5eed_e002);
    let mut seen = Seen::default();
    let mut planted = [0u32; 5];
    let mut wr_id = 0;
    // Created without RDMA READ: a READ is refused by the guard.
    let granted = ALL_OPERATIONS & !SendOperationFlags::Read;
    for (run, shape) in SHAPES.into_iter().enumerate() {
        let mut pair = EntriesPair::new(shape, Operations::All, granted, &mut rng);
        let max_post = pair.libmlx5.max_post();
        let mut posted = 0;
        while posted < 12_000 {
            let mut batch: Vec<Request> = (0..batch_len(&mut rng, max_post))
                .map(|_| {
                    wr_id += 1;
                    let mut request = pair.draw.request(&mut rng, wr_id);
                    if let Op::Read(rkey, addr) = request.op {
                        request.op = Op::Write(rkey, addr);
                    }
                    request
                })
                .collect();
            let fault = match rng.random_range(0..12) {
                0 => Some(Fault::NotGranted),
                1 if !shape.4 => Some(Fault::StreamWithoutStreams),
                2 => Some(Fault::TooManyEntries),
                3 => Some(Fault::InlineTooLong),
                4 => Some(Fault::QueueFull),
                _ => None,
            };
            if let Some(fault) = fault {
                plant(fault, &mut batch, &pair, &mut rng, &mut wr_id);
                planted[fault as usize] += 1;
            }
            let context = || format!("run {run} ({shape:?}), after {posted} requests, {fault:?}");
            let before = pair.libmlx5.posting_index();
            // The guard is not told the inline limit: libmlx5 and the entries check it.
            let libmlx5 = post_dc_guard(pair.libmlx5_views(), None, &pair.routes, &batch);
            let direct = post_dc_guard(pair.direct_views(), None, &pair.routes, &batch);
            assert_eq!(format!("{libmlx5:?}"), format!("{direct:?}"), "{}: outcomes", context());
            match (fault, direct.map_err(|error| error.0)) {
                (None, Ok(())) => {
                    let events = pair.compare(&context);
                    seen.posted(&pair, &batch, before, &events);
                    pair.retire(&context);
                },
                (
                    Some(Fault::NotGranted | Fault::StreamWithoutStreams),
                    Err(PostSendErrorKind::OperationNotEnabled { .. }),
                ) => {
                    // Neither provider saw the refused request; both aborted after the others
                    // were written: the same bytes.
                    assert!(pair.compare(&context).is_empty(), "{}: nothing rung", context());
                    seen.refused_by_guard += 1;
                },
                (Some(_), Err(PostSendErrorKind::QueueFull { source, .. })) => {
                    assert_eq!(source.raw_os_error(), Some(libc::ENOMEM), "{}", context());
                    // Rolled back: nothing posted, nothing rung; the bytes written past the
                    // posting index are each one's own (libmlx5 writes refused requests too).
                    assert!(
                        pair.compare_doorbell(&context).is_empty(),
                        "{}: nothing rung",
                        context()
                    );
                    pair.resync();
                    seen.refused_by_provider += 1;
                },
                (fault, outcome) => panic!("{}: {fault:?} gave {outcome:?}", context()),
            }
            posted += batch.len();
        }
    }
    assert!(planted.iter().all(|&count| count > 20), "{planted:?}");
    assert!(
        seen.refused_by_guard > 100 && seen.refused_by_provider > 100,
        "{seen:?}"
    );
    // Too short to wrap the 16-bit index: the runs above do.
    seen.assert_every_case(false);
}

#[test]
fn batch_addressed_guards_over_the_entries_leave_what_they_leave_over_libmlx5() {
    let mut rng = rng(0x5eed_e003);
    let mut seen = Seen::default();
    let mut wr_id = 0;
    for (run, shape) in SHAPES.into_iter().enumerate() {
        let mut pair = EntriesPair::new(shape, Operations::All, ALL_OPERATIONS, &mut rng);
        let (max_post, max_inline_data) = (pair.libmlx5.max_post(), pair.libmlx5.max_inline_data());
        let mut posted = 0;
        while posted < 30_000 {
            let batch: Vec<Request> = (0..batch_len(&mut rng, max_post))
                .map(|_| {
                    wr_id += 1;
                    pair.draw.request(&mut rng, wr_id)
                })
                .collect();
            let route = rng.random_range(0..pair.routes.len());
            let (dct_number, dc_key, stream) = (rng.random_range(0..1 << 24), rng.random(), rng.random());
            let context = || format!("run {run} ({shape:?}), after {posted} requests");
            let before = pair.libmlx5.posting_index();
            let streams = shape.4;
            let views = (pair.libmlx5_views(), pair.direct_views());
            let post = |views| {
                let route = &pair.routes[route];
                if streams {
                    post_batch_addressed::<DcStreamAddress>(
                        views,
                        max_inline_data,
                        route,
                        dct_number,
                        dc_key,
                        stream,
                        &batch,
                    )
                } else {
                    post_batch_addressed::<DcAddress>(views, max_inline_data, route, dct_number, dc_key, 0, &batch)
                }
            };
            let (libmlx5, direct) = (post(views.0), post(views.1));
            assert!(
                libmlx5.is_ok() && direct.is_ok(),
                "{}: {libmlx5:?} {direct:?}",
                context()
            );
            let events = pair.compare(&context);
            seen.posted(&pair, &batch, before, &events);
            pair.retire(&context);
            posted += batch.len();
        }
    }
    assert!(seen.requests >= 150_000, "{seen:?}");
    seen.assert_every_case(true);
}
