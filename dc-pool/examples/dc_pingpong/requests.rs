//! The client's requests: posting on one DC initiator or through a DC initiator pool, and
//! checking their completions.
use super::*;

/// The server's targets, as the client addresses them.
pub(crate) struct Remote {
    pub(crate) targets: Vec<TargetAddress>,
    pub(crate) slots: u32,
    pub(crate) seed: u64,
}

impl Remote {
    /// Request `iteration`'s target (round-robin) and the slot of that target's region it uses
    /// (the `j`-th request to a target uses slot `j mod slots`).
    pub(crate) fn place(&self, iteration: u64) -> (usize, u64) {
        let targets = self.targets.len() as u64;
        (
            (iteration % targets) as usize,
            (iteration / targets) % u64::from(self.slots),
        )
    }
}

/// The local side of one request: inline bytes or the registered buffer.
pub(crate) enum LocalData<'a> {
    Inline(&'a [u8]),
    Registered { lkey: u32, addr: u64, len: u32 },
}

pub(crate) fn set_data<H: SetInlineData + SetScatterGatherEntry>(handle: H, data: &LocalData<'_>) {
    match *data {
        LocalData::Inline(bytes) => handle.setup_inline_data(bytes),
        // SAFETY: the caller's buffer lies in its memory region and outlives the request (the
        // client's buffer is declared before the DC initiators and every request is completed,
        // or its initiator destroyed, before it is dropped).
        LocalData::Registered { lkey, addr, len } => unsafe { handle.setup_sge(lkey, addr, len) },
    }
}

/// Posts one request of `mode` to `remote_addr` on `target`, through the one DC initiator.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn post_request(
    dci: &mut DcInitiator, ah: &AddressHandle, target: &TargetAddress, mode: Mode, remote_addr: u64, wr_id: u64,
    flags: WorkRequestFlags, data: &LocalData<'_>,
) -> Result<()> {
    let (dct_number, dc_key) = (target.endpoint.dct_number(), target.endpoint.dc_key());
    let mut guard = dci.start_post_send();
    let request = guard.construct_wr(wr_id, flags);
    match mode {
        Mode::Write => set_data(
            request
                .setup_write(target.rkey, remote_addr)
                .setup_dc_addr(ah, dct_number, dc_key),
            data,
        ),
        Mode::Send => set_data(request.setup_send().setup_dc_addr(ah, dct_number, dc_key), data),
        Mode::Read => set_data(
            request
                .setup_read(target.rkey, remote_addr)
                .setup_dc_addr(ah, dct_number, dc_key),
            data,
        ),
    }
    guard
        .post()
        .map_err(|e| format!("Couldn't post request {wr_id}: {}", report(&e)).into())
}

/// Adds one request of `mode` to `remote_addr` on `target` to a pool batch (the pool sets the DC
/// address of the batch's target).
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn add_pool_request(
    guard: &mut DcPoolPostGuard<'_, DcInitiator>, target: &TargetAddress, mode: Mode, remote_addr: u64, wr_id: u64,
    flags: WorkRequestFlags, data: &LocalData<'_>,
) -> Result<()> {
    let request = guard
        .construct_wr(wr_id, flags)
        .map_err(|e| format!("Couldn't add request {wr_id} to the batch: {}", report(&e)))?;
    match mode {
        Mode::Write => set_data(request.setup_write(target.rkey, remote_addr), data),
        Mode::Send => set_data(request.setup_send(), data),
        Mode::Read => set_data(request.setup_read(target.rkey, remote_addr), data),
    }
    Ok(())
}

pub(crate) fn check_completion(wc: &WorkCompletion) -> Result<()> {
    if wc.is_success() {
        return Ok(());
    }
    Err(format!(
        "request {} failed: status {:?} ({}), vendor error {:#x}",
        wc.wr_id(),
        wc.status(),
        wc.status_raw(),
        wc.vendor_err()
    )
    .into())
}

/// The name of the `ibv_wc_status` values a DC request most often fails with.
pub(crate) fn status_text(status: u32) -> String {
    let name = match status {
        4 => " (local protection error)",
        5 => " (flushed)",
        9 => " (remote invalid request)",
        10 => " (remote access error: a wrong DC key or rkey?)",
        12 => " (transport retry counter exceeded: the target does not answer)",
        13 => " (RNR retry counter exceeded: no receive posted)",
        _ => "",
    };
    format!("ibv_wc_status {status}{name}")
}

/// How the client's requests reach the targets, as the ping-pong uses it: one DC initiator, or
/// a pool of them.
pub(crate) trait RoundTrip {
    /// Posts request `wr_id` (signalled) of `mode` to `remote_addr` on `target` and waits until
    /// it completed.
    fn round_trip(&mut self, wr_id: u64, target: usize, remote_addr: u64, data: &LocalData<'_>) -> Result<()>;

    /// What completed where so far.
    fn counts(&self) -> DestinationCounts;
}

/// One DC initiator, one address handle per target.
pub(crate) struct SingleInitiator<'a> {
    pub(crate) dci: &'a mut DcInitiator,
    pub(crate) cq: &'a BasicCompletionQueue,
    pub(crate) ahs: &'a [Arc<AddressHandle>],
    pub(crate) remote: &'a Remote,
    pub(crate) mode: Mode,
    pub(crate) completed: Vec<u64>,
}

impl RoundTrip for SingleInitiator<'_> {
    fn round_trip(&mut self, wr_id: u64, target: usize, remote_addr: u64, data: &LocalData<'_>) -> Result<()> {
        let start = Instant::now();
        post_request(
            self.dci,
            &self.ahs[target],
            &self.remote.targets[target],
            self.mode,
            remote_addr,
            wr_id,
            WorkRequestFlags::Signaled,
            data,
        )?;
        let mut wcs = [WorkCompletion::default(); 4];
        let mut idle_polls = 0u32;
        let wc = loop {
            let polled = self
                .cq
                .poll_work_completions(&mut wcs)
                .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
            if let Some(wc) = polled.first() {
                break *wc;
            }
            idle_polls = idle_polls.wrapping_add(1);
            if idle_polls % 4096 == 0 && start.elapsed() > STALL_TIMEOUT {
                return Err(format!("request {wr_id} did not complete within {STALL_TIMEOUT:?}").into());
            }
        };
        check_completion(&wc)?;
        if wc.wr_id() != wr_id {
            return Err(format!("completion for request {}, expected {wr_id}", wc.wr_id()).into());
        }
        self.completed[target] += 1;
        Ok(())
    }

    fn counts(&self) -> DestinationCounts {
        DestinationCounts {
            completed: self.completed.clone(),
            pool: None,
        }
    }
}

/// A pool of DC initiators, one destination per target.
pub(crate) struct PoolInitiators<'a> {
    pub(crate) pool: &'a mut DcInitiatorPool,
    pub(crate) destinations: Vec<DestinationId>,
    pub(crate) remote: &'a Remote,
    pub(crate) mode: Mode,
    pub(crate) completed: Vec<u64>,
    pub(crate) counts: PoolCounts,
    /// Per target: requests handed back for a retry, to post again before newer ones.
    pub(crate) retries: Vec<VecDeque<u64>>,
    /// Per target: refused for want of an initiator, and not reported ready since: the pool
    /// grants it one as one frees up (`DcPoolEvent::Ready`); no post is tried meanwhile.
    pub(crate) in_line: Vec<bool>,
    pub(crate) events: Vec<DcPoolEvent>,
}

impl<'a> PoolInitiators<'a> {
    pub(crate) fn new(pool: &'a mut DcInitiatorPool, remote: &'a Remote, mode: Mode) -> Self {
        let destinations: Vec<DestinationId> = remote
            .targets
            .iter()
            .map(|target| pool.add_destination(target.endpoint))
            .collect();
        let targets = destinations.len();
        Self {
            pool,
            destinations,
            remote,
            mode,
            completed: vec![0; targets],
            counts: PoolCounts::default(),
            retries: vec![VecDeque::new(); targets],
            in_line: vec![false; targets],
            events: Vec::with_capacity(POLL_BATCH),
        }
    }

    /// Polls the pool once and accounts for what it reports: completions (given to
    /// `completed` as (target, wr_id)), requests handed back for a retry (queued per target),
    /// and failures (an error that stops the run). Returns how many completions were polled.
    pub(crate) fn poll(&mut self, mut completed: impl FnMut(usize, u64)) -> Result<usize> {
        self.events.clear();
        let events = &mut self.events;
        let polled = self
            .pool
            .poll(|event| events.push(event))
            .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
        for event in self.events.drain(..) {
            match event {
                DcPoolEvent::Completed { destination, wr_id } => {
                    self.completed[destination.index()] += 1;
                    completed(destination.index(), wr_id);
                },
                DcPoolEvent::Retry { destination, wr_id } => {
                    self.counts.retried += 1;
                    self.retries[destination.index()].push_back(wr_id);
                },
                DcPoolEvent::Failed {
                    destination,
                    wr_id,
                    status,
                    vendor_err,
                } => {
                    self.counts.failed += 1;
                    return Err(format!(
                        "request {wr_id} to DC target {} failed: {} (vendor_err {vendor_err:#x}); so far {}",
                        destination.index(),
                        status_text(status),
                        DestinationCounts {
                            completed: self.completed.clone(),
                            pool: Some(self.counts),
                        }
                        .summary()
                    )
                    .into());
                },
                // A target refused for want of an initiator holds one now: post to it again.
                DcPoolEvent::Ready { destination } => {
                    self.counts.ready += 1;
                    self.in_line[destination.index()] = false;
                },
                DcPoolEvent::Unreachable { destination } => {
                    return Err(format!("the pool reports DC target {} unreachable", destination.index()).into())
                },
                DcPoolEvent::InitiatorLost { initiator, error } => {
                    return Err(
                        format!("the pool lost DC initiator {initiator}: it could not be recovered: {error}").into(),
                    )
                },
                other => return Err(format!("unexpected pool event {other:?}").into()),
            }
        }
        Ok(polled)
    }
}

impl RoundTrip for PoolInitiators<'_> {
    fn round_trip(&mut self, wr_id: u64, target: usize, remote_addr: u64, data: &LocalData<'_>) -> Result<()> {
        let start = Instant::now();
        let mut to_post = true;
        let mut done = false;
        let mut idle_polls = 0u32;
        loop {
            // A target in line waits for its Ready event rather than trying again.
            if to_post && !self.in_line[target] {
                // One signalled request; a pool with DCI streams posts with
                // start_post_send_on_stream.
                macro_rules! post_one {
                    ($guard:expr) => {{
                        let mut guard = $guard;
                        add_pool_request(
                            &mut guard,
                            &self.remote.targets[target],
                            self.mode,
                            remote_addr,
                            wr_id,
                            WorkRequestFlags::Signaled,
                            data,
                        )?;
                        guard
                            .post()
                            .map_err(|e| format!("Couldn't post request {wr_id}: {}", report(&e)))?;
                    }};
                }
                let destination = self.destinations[target];
                let started = if self.pool.policy() == DcPoolPolicy::Streams {
                    self.pool
                        .start_post_send_on_stream(destination)
                        .map(|guard| -> Result<()> {
                            post_one!(guard);
                            Ok(())
                        })
                } else {
                    self.pool.start_post_send(destination).map(|guard| -> Result<()> {
                        post_one!(guard);
                        Ok(())
                    })
                };
                match started {
                    Ok(posted) => {
                        posted?;
                        to_post = false;
                    },
                    // In line for an initiator: the pool reports when it holds one.
                    Err(e)
                        if matches!(
                            e.0,
                            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
                        ) =>
                    {
                        self.in_line[target] = true
                    },
                    // Nothing was posted (send queue full, quota, recovery): poll, and try again.
                    Err(e) if e.is_would_block() => {},
                    Err(e) => {
                        return Err(
                            format!("Couldn't post request {wr_id} to DC target {target}: {}", report(&e)).into(),
                        )
                    },
                }
            }
            let mut other = None;
            let polled = self.poll(|_, completed| {
                if completed == wr_id {
                    done = true;
                } else {
                    other = Some(completed);
                }
            })?;
            if let Some(other) = other {
                return Err(format!("completion for request {other}, expected {wr_id}").into());
            }
            if done {
                return Ok(());
            }
            // Handed back (another target's error flushed it): post it again.
            if let Some(retry) = self.retries[target].pop_front() {
                if retry != wr_id {
                    return Err(format!("the pool handed back request {retry}, expected {wr_id}").into());
                }
                to_post = true;
            }
            if polled == 0 {
                idle_polls = idle_polls.wrapping_add(1);
                if idle_polls % 4096 == 0 && start.elapsed() > STALL_TIMEOUT {
                    return Err(format!("request {wr_id} did not complete within {STALL_TIMEOUT:?}").into());
                }
            }
        }
    }

    fn counts(&self) -> DestinationCounts {
        DestinationCounts {
            completed: self.completed.clone(),
            pool: Some(self.counts),
        }
    }
}
