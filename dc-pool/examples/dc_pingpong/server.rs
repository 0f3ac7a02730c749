//! The server: DC targets on one shared receive queue, refilled on its limit event in send
//! mode, and the checks of what the client wrote or sent.
use super::*;

/// The send-mode receive side: the SRQ's slots, which are posted, and the limit refills.
pub(crate) struct Receiver<'a> {
    pub(crate) srq: &'a SharedReceiveQueue,
    pub(crate) lkey: u32,
    pub(crate) buffer: &'a Buffer,
    pub(crate) size: u32,
    /// How many slots the buffer has (the SRQ's receives).
    pub(crate) slots: u32,
    pub(crate) limit: u32,
    /// Slots whose receive completed and was checked: free to post again.
    pub(crate) free: Vec<u32>,
    /// Receives posted and not yet seen completing.
    pub(crate) outstanding: u32,
    pub(crate) limit_events: u64,
    pub(crate) reposted: u64,
    /// Refills made because the SRQ had no receive left and no limit event had come.
    pub(crate) refills_without_event: u64,
}

impl Receiver<'_> {
    /// Posts every free slot's receive.
    pub(crate) fn refill(&mut self) -> Result<()> {
        if self.free.is_empty() {
            return Ok(());
        }
        let mut guard = self.srq.start_post_recv();
        for &slot in &self.free {
            let offset = slot as usize * self.size as usize;
            // SAFETY: the slot lies in the buffer the memory region of `lkey` covers; the buffer
            // outlives the SRQ (declared before it), and the slot is not read again before its
            // receive completes.
            unsafe {
                guard
                    .construct_wr(u64::from(slot))
                    .setup_sge(self.lkey, self.buffer.addr(offset), self.size)
            };
        }
        let count = self.free.len();
        match guard.post() {
            Ok(()) => {
                self.outstanding += count as u32;
                self.reposted += count as u64;
                self.free.clear();
                Ok(())
            },
            Err(err) => Err(format!("Couldn't post receives: {}", report(&err)).into()),
        }
    }

    /// Arms the SRQ limit: the device raises one event once fewer than `limit` receives remain.
    pub(crate) fn arm(&self) -> Result<()> {
        self.srq
            .modify(SharedReceiveQueueModification::ArmLimit(self.limit))
            .map_err(|e| format!("Couldn't arm the SRQ limit: {}", report(&e)).into())
    }
}

/// What the server saw of the client's sends.
pub(crate) struct SendOutcome {
    pub(crate) received: u64,
    /// Messages received per target (by the DCT number of the receive completion).
    pub(crate) per_target: Vec<u64>,
    /// The first problem found, if any.
    pub(crate) failure: Option<String>,
}

/// Receives `iters` messages from the SRQ, checking each (ping-pong: its data, in order, and its
/// target; bandwidth: its length), counts them per target, and refills the SRQ on its limit
/// event.
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive_messages(
    cq: &BasicCompletionQueue, events: &AsyncEventReader, receiver: &mut Receiver<'_>, parameters: &TestParameters,
    seed: u64, dct_numbers: &[u32], channel: &mut Channel,
) -> Result<SendOutcome> {
    let iters = u64::from(parameters.iters);
    let targets = dct_numbers.len();
    // With one target every receive is its; with more, the receive completion's QP number is the
    // DCT number of the target that received the message.
    let target_of: HashMap<u32, usize> = dct_numbers.iter().enumerate().map(|(t, &n)| (n, t)).collect();
    let mut outcome = SendOutcome {
        received: 0,
        per_target: vec![0; targets],
        failure: None,
    };
    let mut wcs = [WorkCompletion::default(); POLL_BATCH];
    let mut message = vec![0u8; parameters.size as usize];
    let mut scratch = Vec::new();
    let mut last_progress = Instant::now();
    let mut idle_polls = 0u32;
    let mut polls = 0u32;
    let srq_id = receiver.srq.id();
    while outcome.received < iters {
        polls = polls.wrapping_add(1);
        let polled = cq
            .poll_work_completions(&mut wcs)
            .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
        for wc in polled {
            receiver.outstanding = receiver.outstanding.saturating_sub(1);
            let slot = u32::try_from(wc.wr_id()).ok().filter(|&s| s < receiver.slots);
            let Some(slot) = slot else {
                return Err(format!("receive completion with unknown wr_id {}", wc.wr_id()).into());
            };
            receiver.free.push(slot);
            let index = outcome.received;
            outcome.received += 1;
            if outcome.failure.is_some() {
                continue;
            }
            if !wc.is_success() {
                outcome.failure = Some(format!(
                    "receive {index} failed: status {:?} ({}), vendor error {:#x}",
                    wc.status(),
                    wc.status_raw(),
                    wc.vendor_err()
                ));
                continue;
            }
            let target = if targets == 1 {
                Some(0)
            } else {
                target_of.get(&wc.qp_number()).copied()
            };
            let Some(target) = target else {
                outcome.failure = Some(format!(
                    "receive {index} on QP number {:#x}, which is none of the DC targets' DCT numbers",
                    wc.qp_number()
                ));
                continue;
            };
            outcome.per_target[target] += 1;
            if wc.byte_len() != parameters.size {
                outcome.failure = Some(format!(
                    "receive {index}: {} bytes, expected {}",
                    wc.byte_len(),
                    parameters.size
                ));
            } else if !parameters.bw {
                // One message at a time: message `index` is request `index`, sent to target
                // `index mod M`.
                let expected = (index % targets as u64) as usize;
                receiver
                    .buffer
                    .read(slot as usize * parameters.size as usize, &mut message);
                if target != expected {
                    outcome.failure = Some(format!(
                        "message {index} arrived at DC target {target}, expected DC target {expected}"
                    ));
                } else if let Some((offset, found, expected)) = pattern_mismatch(seed, index, &message, &mut scratch) {
                    outcome.failure = Some(format!(
                        "message {index} (slot {slot}): byte {offset} is {found:#04x}, expected {expected:#04x}"
                    ));
                }
            }
        }
        if !polled.is_empty() {
            last_progress = Instant::now();
        }
        // The SRQ limit event: drain what already completed (its slots become free), refill
        // every free slot, arm the limit again. Looked for whenever the CQ is drained, and every
        // few polls under a stream of completions that never drains it.
        if polled.len() < POLL_BATCH || polls % 8 == 0 {
            while let Some(event) = events
                .try_read()
                .map_err(|e| format!("reading async events failed: {}", report(&e)))?
            {
                match (event.event_type(), event.element()) {
                    (AsyncEventType::SharedReceiveQueueLimitReached, AsyncEventElement::SharedReceiveQueue(id))
                        if id == srq_id =>
                    {
                        receiver.limit_events += 1;
                        receiver.refill()?;
                        receiver.arm()?;
                    },
                    (event_type, element) => eprintln!("async event {event_type:?} on {element:?}"),
                }
            }
        }
        // A safety net only: had the limit event not come, the SRQ would run dry and the client
        // would retry on RNR forever. Counted, so that a run shows whether the event did it.
        if receiver.outstanding == 0 && !receiver.free.is_empty() {
            receiver.refills_without_event += 1;
            receiver.refill()?;
            receiver.arm()?;
        }
        if polled.is_empty() {
            idle_polls += 1;
            if idle_polls % 4096 == 0 {
                if last_progress.elapsed() > STALL_TIMEOUT {
                    return Err(
                        format!("no message for {STALL_TIMEOUT:?} after {} of {iters}", outcome.received).into(),
                    );
                }
                if channel.peer_closed() {
                    return Err(format!(
                        "the client closed the connection after {} of {iters} messages",
                        outcome.received
                    )
                    .into());
                }
            }
        }
    }
    Ok(outcome)
}

/// Checks that `counts` (per target) is the round-robin split of the requests; `what` says whose
/// counts they are.
pub(crate) fn check_round_robin(counts: &[u64], parameters: &TestParameters, what: &str) -> Result<(), String> {
    let targets = u64::from(parameters.targets);
    if counts.len() as u64 != targets {
        return Err(format!("{what}: {} targets, expected {targets}", counts.len()));
    }
    for (target, &count) in counts.iter().enumerate() {
        let expected = round_robin_share(u64::from(parameters.iters), targets, target as u64);
        if count != expected {
            return Err(format!(
                "{what}: {count} at DC target {target}, expected {expected} (round-robin)"
            ));
        }
    }
    Ok(())
}

pub(crate) fn counts_text(counts: &[u64]) -> String {
    counts.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// A buffer and the memory region registered on it; the region is deregistered (dropped) first.
pub(crate) struct Region {
    pub(crate) mr: Arc<MemoryRegion>,
    pub(crate) buffer: Buffer,
}

/// Checks the write slots: slot `s` of target `t` holds the pattern of the last request that
/// wrote it (the `j`-th request to target `t` is request `t + j·M` and writes its slot `j mod
/// slots`).
pub(crate) fn check_written(
    regions: &[Region], parameters: &TestParameters, slots: u32, seed: u64,
) -> Result<String, String> {
    let size = parameters.size as usize;
    let iters = u64::from(parameters.iters);
    let targets = regions.len() as u64;
    let slots = u64::from(slots);
    let mut data = vec![0u8; size];
    let mut scratch = Vec::new();
    let mut checked = 0u64;
    for (target, region) in regions.iter().enumerate() {
        let requests = round_robin_share(iters, targets, target as u64);
        for slot in 0..slots.min(requests) {
            let last = target as u64 + (slot + (requests - 1 - slot) / slots * slots) * targets;
            region.buffer.read(slot as usize * size, &mut data);
            if let Some((offset, found, expected)) = pattern_mismatch(seed, last, &data, &mut scratch) {
                return Err(format!(
                    "DC target {target}, slot {slot} (last written by request {last}): byte {offset} is {found:#04x}, \
                     expected {expected:#04x}"
                ));
            }
            checked += 1;
        }
    }
    let of_targets = if targets > 1 {
        format!(" ({targets} DC targets)")
    } else {
        String::new()
    };
    Ok(format!(
        "{checked} slots hold the data of the last iteration that wrote each{of_targets}"
    ))
}

/// "the DC target" for one, "DC target <t>" among several.
pub(crate) fn target_name(target: usize, targets: u32) -> String {
    if targets == 1 {
        "the DC target".to_string()
    } else {
        format!("DC target {target}")
    }
}

pub(crate) fn run_server(args: &Args, parameters: &TestParameters) -> Result<()> {
    let (ctx, name) = open_mlx5_device(args)?;
    let port = query_local_port(&ctx, &name, args)?;
    let size = parameters.size;
    let targets = parameters.targets;
    let slots = parameters.server_slots(args.rx_depth);
    let len = u64::from(slots) * u64::from(size);
    // Send: one region for the SRQ's receives, whichever target they come through; write and
    // read: one region per target.
    let region_count = if parameters.mode == Mode::Send { 1 } else { targets };
    if len
        .checked_mul(u64::from(region_count))
        .is_none_or(|total| total > MAX_BUFFER)
    {
        return Err(format!(
            "{region_count} regions of {slots} slots of {size} bytes are more than {MAX_BUFFER} bytes: lower -s, -r or \
             --targets"
        )
        .into());
    }
    let seed = rand::random::<u64>();

    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD: {}", report(&e)))?;
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
    // Declared before every verbs object that reaches the buffers (the SRQ, the DC targets), so
    // dropped after them.
    let mut regions = Vec::with_capacity(region_count as usize);
    for region in 0..region_count as usize {
        let mut buffer = Buffer::new(len)?;
        if parameters.mode == Mode::Read {
            let mut data = vec![0u8; size as usize];
            for slot in 0..u64::from(slots) {
                fill_pattern(seed, read_pattern(region, slot, slots), &mut data);
                buffer.write(slot as usize * size as usize, &data);
            }
        }
        // SAFETY: the buffer outlives the memory region (a Region drops its region first) and
        // never moves.
        let mr = unsafe { pd.reg_mr(buffer.addr(0) as usize, buffer.len(), access) }
            .map_err(|e| format!("Couldn't register MR: {}", report(&e)))?;
        regions.push(Region { mr, buffer });
    }
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(args.rx_depth + 1)
        .build()
        .map_err(|e| format!("Couldn't create CQ: {}", report(&e)))?;
    let srq = pd
        .create_srq_builder()
        .setup_max_wr(args.rx_depth)
        .setup_max_sge(1)
        .build()
        .map_err(|e| format!("Couldn't create SRQ: {}", report(&e)))?;
    let mut bring_up = DcTargetBringUp::new(port.number);
    // The MTU its endpoints announce, and answer READs with.
    bring_up.setup_path_mtu(port.mtu);
    if port.roce || args.gid_idx.is_some() {
        bring_up.setup_src_gid_index(port.gid_index);
    }
    // Every target on the one SRQ and CQ, each with its own DC key.
    let mut dcts: Vec<DcTarget> = Vec::with_capacity(targets as usize);
    let mut endpoints = Vec::with_capacity(targets as usize);
    for target in 0..targets as usize {
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(cq.clone())
            .setup_srq(&srq)
            .setup_dc_key(rand::random::<u64>())
            .setup_access_flags(access)
            .build()
            .map_err(|e| {
                if e.is_not_supported() {
                    not_mlx5(&name)
                } else {
                    format!("Couldn't create {}: {}", target_name(target, targets), report(&e))
                }
            })?;
        dct.bring_up(&bring_up)
            .map_err(|e| format!("Couldn't bring {} to RTR: {}", target_name(target, targets), report(&e)))?;
        let endpoint = dct
            .endpoint()
            .map_err(|e| format!("Couldn't describe {}: {}", target_name(target, targets), report(&e)))?;
        endpoints.push(endpoint);
        dcts.push(dct);
    }
    let dct_numbers: Vec<u32> = endpoints.iter().map(DcEndpoint::dct_number).collect();
    let addresses: Vec<TargetAddress> = endpoints
        .iter()
        .enumerate()
        .map(|(target, endpoint)| {
            let region = &regions[if parameters.mode == Mode::Send { 0 } else { target }];
            TargetAddress {
                endpoint: *endpoint,
                rkey: region.mr.rkey(),
                addr: region.buffer.addr(0),
                len,
            }
        })
        .collect();

    // Send mode: every slot's receive posted, the limit armed at half, before the client comes.
    let events = ctx.async_event_reader();
    events.set_nonblocking(true).map_err(|e| format!("async events: {e}"))?;
    let mut receiver = Receiver {
        srq: &srq,
        lkey: regions[0].mr.lkey(),
        buffer: &regions[0].buffer,
        size,
        slots,
        limit: (args.rx_depth / 2).max(1),
        free: Vec::with_capacity(slots as usize),
        outstanding: 0,
        limit_events: 0,
        reposted: 0,
        refills_without_event: 0,
    };
    if parameters.mode == Mode::Send {
        receiver.free.extend((0..slots).rev());
        receiver.refill()?;
        receiver.reposted = 0;
        receiver.arm()?;
    }

    print_banner(parameters, &name, &port, None);
    for address in addresses.iter().take(LISTED) {
        let endpoint = &address.endpoint;
        println!(
            " local address:  LID {:#06x} DCTN {:#08x} DC key {:#018x} RKey {:#010x} VAddr {:#018x} GID {}",
            endpoint.lid(),
            endpoint.dct_number(),
            endpoint.dc_key(),
            address.rkey,
            address.addr,
            Ipv6Addr::from(endpoint.gid())
        );
    }
    if addresses.len() > LISTED {
        println!(" local address:  … and {} more DC targets", addresses.len() - LISTED);
    }

    // Dual-stack where IPv6 is available.
    let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, args.port))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, args.port)))
        .map_err(|e| format!("Couldn't listen to port {}: {e}", args.port))?;
    let (stream, _) = listener.accept().map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    let mut channel = Channel::new(stream)?;
    let hello: Hello = channel.receive("the client's parameters")?;
    if hello.parameters != *parameters {
        let reason = format!(
            "the client's parameters {:?} differ from the server's {:?}: give both the same --mode, -s, -n, --bw, \
             --targets, --pool, --policy, --streams and -m",
            hello.parameters, parameters
        );
        let _ = channel.send(&ServerMessage::Refused { reason: reason.clone() });
        return Err(reason.into());
    }
    println!(
        " remote address: LID {:#06x} {} GID {}",
        hello.lid,
        qp_numbers_text(&hello.qp_numbers),
        hello.gid
    );
    println!("{RESULT_LINE}");
    channel.send(&ServerMessage::Ready {
        targets: addresses,
        slots,
        seed,
    })?;

    // Write and read leave no trace on the target's side: the client's report says when it is
    // done. Sends complete receives here.
    let outcome = match parameters.mode {
        Mode::Send => Some(receive_messages(
            &cq,
            &events,
            &mut receiver,
            parameters,
            seed,
            &dct_numbers,
            &mut channel,
        )?),
        Mode::Write | Mode::Read => None,
    };
    let done: Done = channel.receive("the client's report")?;
    print_report(&done.report, done.destinations.as_ref(), args.report_gbits);

    let verdict = match (&outcome, parameters.mode, parameters.bw) {
        (Some(outcome), _, _) => match &outcome.failure {
            Some(failure) => Err(failure.clone()),
            None => check_round_robin(&outcome.per_target, parameters, "messages received").map(|()| {
                let per_target = if targets > 1 {
                    format!("; per DC target (by DCT number): {}", counts_text(&outcome.per_target))
                } else {
                    String::new()
                };
                format!(
                    "{} messages received{}; SRQ limit events {}, receives reposted {}, refills without an event \
                     {}{per_target}",
                    outcome.received,
                    if parameters.bw {
                        " (lengths checked)"
                    } else {
                        " and checked, in order"
                    },
                    receiver.limit_events,
                    receiver.reposted,
                    receiver.refills_without_event
                )
            }),
        },
        (None, Mode::Write, false) => check_written(&regions, parameters, slots, seed),
        (None, Mode::Write, true) => Ok("written (bandwidth mode: data not checked)".to_string()),
        (None, _, _) => Ok("read by the client (it checks the data)".to_string()),
    };
    // The client's own account, when it gives one, must be the round-robin split too.
    let verdict = verdict.and_then(|detail| match (&done.destinations, parameters.counts_destinations()) {
        (Some(counts), true) => {
            check_round_robin(&counts.completed, parameters, "the client's completed requests")?;
            match counts.pool {
                Some(pool) if pool.failed > 0 => {
                    Err(format!("the client's pool reports {} failed requests", pool.failed))
                },
                _ => Ok(detail),
            }
        },
        (None, true) => Err("the client's report lacks its per-destination counts".to_string()),
        (_, false) => Ok(detail),
    });
    let (ok, detail) = match verdict {
        Ok(detail) => (true, detail),
        Err(detail) => (false, detail),
    };
    println!(" server check: {}: {detail}", if ok { "ok" } else { "FAILED" });
    channel.send(&ServerMessage::Verdict {
        ok,
        detail: detail.clone(),
    })?;
    if !ok {
        return Err(format!("server check failed: {detail}").into());
    }
    drop(receiver);
    // Destroy in order: DC targets, SRQ, CQ, memory regions and their buffers, PD, then the
    // context.
    drop(dcts);
    drop(srq);
    drop(cq);
    drop(regions);
    drop(pd);
    drop(ctx);
    Ok(())
}
