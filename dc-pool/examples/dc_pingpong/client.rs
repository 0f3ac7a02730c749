//! The client: connection to the server, then the ping-pong or the bandwidth run, on one DC
//! initiator or through a pool.
use super::*;

/// Latency: one request at a time, each checked; request `i` goes to target `i mod M`.
pub(crate) fn run_latency(
    initiators: &mut dyn RoundTrip, remote: &Remote, buffer: &mut Buffer, lkey: u32, parameters: &TestParameters,
    inline: bool,
) -> Result<LatencyReport> {
    let size = parameters.size as usize;
    let mut message = vec![0u8; size];
    let zeroes = vec![0u8; size];
    let mut scratch = Vec::new();
    let mut samples = Vec::with_capacity(parameters.iters as usize);
    for iteration in 0..u64::from(parameters.iters) {
        let (target, slot) = remote.place(iteration);
        let remote_addr = remote.targets[target].addr + slot * size as u64;
        match parameters.mode {
            Mode::Write | Mode::Send => {
                fill_pattern(remote.seed, iteration, &mut message);
                if !inline {
                    buffer.write(0, &message);
                }
            },
            // Cleared, so that a read that brought nothing cannot pass the check.
            Mode::Read => buffer.write(0, &zeroes),
        }
        let data = if inline {
            LocalData::Inline(&message)
        } else {
            LocalData::Registered {
                lkey,
                addr: buffer.addr(0),
                len: parameters.size,
            }
        };
        let start = Instant::now();
        initiators.round_trip(iteration, target, remote_addr, &data)?;
        let elapsed = start.elapsed();
        if parameters.mode == Mode::Read {
            buffer.read(0, &mut message);
            let pattern = read_pattern(target, slot, remote.slots);
            if let Some((offset, found, expected)) = pattern_mismatch(remote.seed, pattern, &message, &mut scratch) {
                return Err(format!(
                    "read {iteration} (DC target {target}, slot {slot}): byte {offset} is {found:#04x}, expected \
                     {expected:#04x}"
                )
                .into());
            }
        }
        samples.push(elapsed.as_secs_f64() * 1e6);
    }
    println!(
        " client check: ok: {} {} requests completed{}",
        parameters.iters,
        parameters.mode.verb(),
        if parameters.mode == Mode::Read {
            ", each read checked"
        } else {
            " (the server checks the data)"
        }
    );
    Ok(latency_report(parameters, &mut samples))
}

/// The bandwidth runs' inline message: the pattern of `seed` from offset 0, `size` bytes.
fn inline_message(seed: u64, size: u32) -> Vec<u8> {
    let mut message = vec![0u8; size as usize];
    fill_pattern(seed, 0, &mut message);
    message
}

/// What every bandwidth request carries: the inline `message`, or else the first `size` bytes
/// of `buffer`.
fn bandwidth_data<'m>(message: Option<&'m [u8]>, buffer: &Buffer, lkey: u32, size: u32) -> LocalData<'m> {
    match message {
        Some(message) => LocalData::Inline(message),
        None => LocalData::Registered {
            lkey,
            addr: buffer.addr(0),
            len: size,
        },
    }
}

/// Bandwidth through one DC initiator: up to `tx_depth` requests outstanding, one in `cq_mod`
/// signalled, request `i` to target `i mod M`. Timestamps are taken at the first post of each
/// window of `cq_mod` requests and at its signalled completion.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_bandwidth(
    single: &mut SingleInitiator<'_>, buffer: &Buffer, lkey: u32, parameters: &TestParameters, inline: bool,
    tx_depth: u32, cq_mod: u32,
) -> Result<BandwidthReport> {
    let remote = single.remote;
    let targets = remote.targets.len() as u64;
    let iters = u64::from(parameters.iters);
    let cq_mod = u64::from(cq_mod);
    let tx_depth = u64::from(tx_depth);
    let windows = iters.div_ceil(cq_mod) as usize;
    let mut posted_at = Vec::with_capacity(windows);
    let mut completed_at = Vec::with_capacity(windows);
    let message = inline.then(|| inline_message(remote.seed, parameters.size));
    let data = bandwidth_data(message.as_deref(), buffer, lkey, parameters.size);
    let mut wcs = [WorkCompletion::default(); POLL_BATCH];
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    let mut idle_polls = 0u32;
    while completed < iters {
        while posted < iters && posted - completed < tx_depth {
            if posted % cq_mod == 0 {
                posted_at.push(Instant::now());
            }
            let signaled = (posted + 1) % cq_mod == 0 || posted + 1 == iters;
            let flags = if signaled {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            let target = (posted % targets) as usize;
            let address = &remote.targets[target];
            post_request(
                single.dci,
                &single.ahs[target],
                address,
                parameters.mode,
                address.addr,
                posted,
                flags,
                &data,
            )?;
            posted += 1;
        }
        let polled = single
            .cq
            .poll_work_completions(&mut wcs)
            .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
        if polled.is_empty() {
            idle_polls += 1;
            if idle_polls % 4096 == 0 && last_progress.elapsed() > STALL_TIMEOUT {
                return Err(format!("no completion for {STALL_TIMEOUT:?} after {completed} of {iters}").into());
            }
            continue;
        }
        let now = Instant::now();
        last_progress = now;
        for wc in polled {
            check_completion(wc)?;
            let index = wc.wr_id();
            let expected = ((completed / cq_mod + 1) * cq_mod).min(iters) - 1;
            if index != expected {
                return Err(format!("completion for request {index}, expected {expected}").into());
            }
            // One initiator completes in order: the signalled request covers those before it.
            for request in completed..=index {
                single.completed[(request % targets) as usize] += 1;
            }
            completed = index + 1;
            completed_at.push(now);
        }
    }
    Ok(bandwidth_report(parameters, cq_mod, &posted_at, &completed_at))
}

/// Bandwidth through the pool: each target's requests (request `i` is target `i mod M`'s) go in
/// batches of up to `cq_mod`, the last of each signalled, as far as the policy grants the target
/// an initiator and its send queue has room; requests handed back for a retry are posted again
/// first. At most `in_flight_limit` requests are outstanding in all (the CQ holds that many
/// completions). Windows of `cq_mod` requests count posts and completions over all targets.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_pool_bandwidth(
    pool: &mut PoolInitiators<'_>, buffer: &Buffer, lkey: u32, parameters: &TestParameters, inline: bool, cq_mod: u32,
    in_flight_limit: u64,
) -> Result<BandwidthReport> {
    let remote = pool.remote;
    let mode = parameters.mode;
    let targets = remote.targets.len() as u64;
    let iters = u64::from(parameters.iters);
    let cq_mod = u64::from(cq_mod);
    let windows = iters.div_ceil(cq_mod) as usize;
    let mut posted_at = Vec::with_capacity(windows);
    let mut completed_at = Vec::with_capacity(windows);
    let message = inline.then(|| inline_message(remote.seed, parameters.size));
    let data = bandwidth_data(message.as_deref(), buffer, lkey, parameters.size);
    // Per target: its next request never posted.
    let mut next: Vec<u64> = (0..targets).collect();
    // `posted` counts new requests (the windows), `sent` every post, retries too.
    let (mut posted, mut sent, mut completed) = (0u64, 0u64, 0u64);
    let mut first = 0usize;
    let mut last_progress = Instant::now();
    let mut idle_polls = 0u32;
    while completed < iters {
        // One turn over the targets, from a different one each time.
        for turn in 0..targets as usize {
            // Requests neither completed nor handed back are in flight.
            let in_flight = sent - completed - pool.counts.retried;
            if in_flight >= in_flight_limit {
                break;
            }
            let target = (first + turn) % targets as usize;
            let fresh = if next[target] < iters {
                (iters - 1 - next[target]) / targets + 1
            } else {
                0
            };
            let pending = pool.retries[target].len() as u64 + fresh;
            // A target in line for an initiator waits for its Ready event.
            if pending == 0 || pool.in_line[target] {
                continue;
            }
            // A batch for the target; a pool with DCI streams posts with
            // start_post_send_on_stream.
            macro_rules! fill_and_post {
                ($guard:expr) => {{
                    let mut guard = $guard;
                    let batch = pending
                        .min(cq_mod)
                        .min(guard.room() as u64)
                        .min(in_flight_limit - in_flight);
                    let address = &remote.targets[target];
                    for index in 0..batch {
                        let wr_id = match pool.retries[target].pop_front() {
                            Some(wr_id) => wr_id,
                            None => {
                                let wr_id = next[target];
                                next[target] += targets;
                                if posted % cq_mod == 0 {
                                    posted_at.push(Instant::now());
                                }
                                posted += 1;
                                wr_id
                            },
                        };
                        let flags = if index + 1 == batch {
                            WorkRequestFlags::Signaled
                        } else {
                            WorkRequestFlags::none()
                        };
                        add_pool_request(&mut guard, address, mode, address.addr, wr_id, flags, &data)?;
                    }
                    sent += batch;
                    guard
                        .post()
                        .map_err(|e| format!("Couldn't post a batch to DC target {target}: {}", report(&e)))?;
                }};
            }
            let destination = pool.destinations[target];
            let started = if pool.pool.policy() == DcPoolPolicy::Streams {
                match pool.pool.start_post_send_on_stream(destination) {
                    Ok(guard) => {
                        fill_and_post!(guard);
                        Ok(())
                    },
                    Err(e) => Err(e),
                }
            } else {
                match pool.pool.start_post_send(destination) {
                    Ok(guard) => {
                        fill_and_post!(guard);
                        Ok(())
                    },
                    Err(e) => Err(e),
                }
            };
            match started {
                Ok(()) => {},
                // In line: the pool grants it an initiator as one frees up, and says so.
                Err(e)
                    if matches!(
                        e.0,
                        PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
                    ) =>
                {
                    pool.in_line[target] = true
                },
                // Its quota used, its send queue full, or its initiator recovering: later.
                Err(e) if e.is_would_block() => continue,
                Err(e) => return Err(format!("Couldn't post to DC target {target}: {}", report(&e)).into()),
            }
        }
        first = (first + 1) % targets as usize;
        let before = completed;
        let polled = pool.poll(|_, _| completed += 1)?;
        let now = Instant::now();
        for count in before + 1..=completed {
            if count % cq_mod == 0 || count == iters {
                completed_at.push(now);
            }
        }
        if polled == 0 {
            idle_polls = idle_polls.wrapping_add(1);
            if idle_polls % 4096 == 0 && last_progress.elapsed() > STALL_TIMEOUT {
                return Err(format!(
                    "no completion for {STALL_TIMEOUT:?} after {completed} of {iters}; {}",
                    pool.counts().summary()
                )
                .into());
            }
        } else {
            last_progress = now;
        }
    }
    Ok(bandwidth_report(parameters, cq_mod, &posted_at, &completed_at))
}

/// The client's DC initiators: one, with its send CQ (dropped after it), or a pool, which
/// creates its own.
// One value, made once and kept on the stack for the run: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Initiators {
    Single(DcInitiator, Arc<BasicCompletionQueue>),
    Pool(DcInitiatorPool),
}

pub(crate) fn run_client(args: &Args, parameters: &TestParameters, server: &str) -> Result<()> {
    // The device first: on one that is not mlx5, nothing goes over the network.
    let (ctx, name) = open_mlx5_device(args)?;
    let port = query_local_port(&ctx, &name, args)?;
    let tx_depth = if parameters.bw { args.tx_depth } else { 1 };
    // perftest: every request signalled above 8 KiB unless -Q says otherwise; never more than
    // the send queue holds.
    let cq_mod = args
        .cq_mod
        .unwrap_or(if parameters.size > CQ_MOD_SIZE_LIMIT {
            1
        } else {
            DEFAULT_CQ_MOD
        })
        .min(tx_depth);
    let inline_size = if parameters.mode == Mode::Read {
        0
    } else {
        args.inline_size
    };
    let streams = match parameters.pool {
        Some(pool) if pool.policy == PoolPolicy::Streams => Some(dci_streams(&ctx, &name, pool.streams)?),
        _ => None,
    };
    // Every request of every initiator may complete on the one send CQ: N initiators hold at
    // least N·-t requests (the pool sizes its own CQ for the send queues they were granted,
    // which can be more than asked for).
    let initiator_count = parameters.pool.map_or(1, |pool| pool.initiators);
    let cqe = u64::from(initiator_count) * u64::from(tx_depth) + 1;
    if parameters.pool.is_some() {
        let max_cqe = ctx
            .query_device()
            .map_err(|e| format!("{name}: ibv_query_device failed: {}", report(&e)))?
            .max_cqe();
        if cqe > u64::try_from(max_cqe).unwrap_or(0) {
            return Err(format!(
                "--pool {initiator_count} with -t {tx_depth} needs a CQ of {cqe} entries; {name} allows {max_cqe}: \
                 lower --pool or -t"
            )
            .into());
        }
    }

    // Declared before every verbs object that refers to it, so dropped after them.
    let mut buffer = Buffer::new(u64::from(parameters.size))?;
    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD: {}", report(&e)))?;
    // SAFETY: the buffer outlives the memory region (declared before it) and never moves.
    let mr = unsafe { pd.reg_mr(buffer.addr(0) as usize, buffer.len(), AccessFlags::LocalWrite) }
        .map_err(|e| format!("Couldn't register MR: {}", report(&e)))?;
    let mut initiators = match parameters.pool {
        None => {
            let cq = ctx
                .create_cq_builder()
                .setup_cqe(cqe as u32)
                .build()
                .map_err(|e| format!("Couldn't create CQ: {}", report(&e)))?;
            let mut dci = pd
                .create_dci_builder()
                .setup_send_cq(cq.clone())
                .setup_max_send_wr(tx_depth)
                .setup_max_inline_data(inline_size)
                .setup_send_ops_flags(parameters.mode.send_ops())
                .build()
                .map_err(|e| {
                    if e.is_not_supported() {
                        not_mlx5(&name)
                    } else {
                        format!("Couldn't create the DC initiator: {}", report(&e))
                    }
                })?;
            dci.bring_up(DcInitiatorBringUp::new(port.number).setup_path_mtu(port.mtu))
                .map_err(|e| format!("Couldn't bring the DC initiator to RTS: {}", report(&e)))?;
            Initiators::Single(dci, cq)
        },
        Some(pool) => {
            let mut initiator = pd.create_dci_builder();
            initiator
                .setup_max_send_wr(tx_depth)
                .setup_max_inline_data(inline_size)
                .setup_send_ops_flags(parameters.mode.send_ops());
            if let Some(streams) = streams {
                initiator.setup_dci_streams(streams);
            }
            // The pool's address handles are sent from the initiators' source GID: -g's.
            let mut bring_up = DcInitiatorBringUp::new(port.number);
            bring_up.setup_path_mtu(port.mtu);
            if port.roce {
                bring_up.setup_source_gid(SourceGid::Index(port.gid_index));
            }
            let mut builder = pd.create_dci_pool_builder();
            builder
                .setup_own_send_cq(&ctx, None)
                .setup_initiators(pool.initiators as usize)
                .setup_policy(pool.policy.to_pool())
                .setup_initiator(&initiator)
                .setup_bring_up(bring_up);
            let pool = builder.build().map_err(|e| {
                if e.is_not_supported() && streams.is_some() {
                    no_dci_streams(&name)
                } else if e.is_not_supported() {
                    not_mlx5(&name)
                } else {
                    format!(
                        "Couldn't create the pool of {} DC initiators: {}",
                        pool.initiators,
                        report(&e)
                    )
                }
            })?;
            Initiators::Pool(pool)
        },
    };
    let (qp_numbers, max_inline): (Vec<u32>, u32) = match &initiators {
        Initiators::Single(dci, _) => (vec![dci.qp_number()], dci.max_inline_data()),
        Initiators::Pool(pool) => {
            let members: Vec<&DcInitiator> = (0..pool.initiator_count()).filter_map(|i| pool.initiator(i)).collect();
            (
                members.iter().map(|dci| dci.qp_number()).collect(),
                members.iter().map(|dci| dci.max_inline_data()).min().unwrap_or(0),
            )
        },
    };
    let inline = parameters.mode != Mode::Read && parameters.size <= max_inline.min(inline_size);

    let mut channel = Channel::new(connect(server, args.port)?)?;
    channel.send(&Hello {
        parameters: *parameters,
        qp_numbers: qp_numbers.clone(),
        lid: port.lid,
        gid: Ipv6Addr::from(port.gid),
    })?;
    let remote = match channel.receive("the server's DC endpoints")? {
        ServerMessage::Ready { targets, slots, seed } => {
            if targets.len() != parameters.targets as usize {
                return Err(format!(
                    "the server sent {} DC targets, expected {}",
                    targets.len(),
                    parameters.targets
                )
                .into());
            }
            let needed = u64::from(slots) * u64::from(parameters.size);
            for (index, target) in targets.iter().enumerate() {
                let (addr, len) = (target.addr, target.len);
                if slots == 0 || len < needed || addr.checked_add(len).is_none() {
                    return Err(format!(
                        "DC target {index}'s region ({len} bytes at {addr:#x}, {slots} slots) does not hold {slots} \
                         messages of {} bytes",
                        parameters.size
                    )
                    .into());
                }
            }
            // What the targets' endpoints say of their MTU, against the initiators'.
            let target_mtus: Vec<Option<Mtu>> = targets.iter().map(|target| target.endpoint.path_mtu()).collect();
            if let Some(why) = path_mtu_mismatch(port.mtu, &target_mtus, parameters) {
                return Err(why.into());
            }
            Remote { targets, slots, seed }
        },
        ServerMessage::Refused { reason } => return Err(format!("the server refused: {reason}").into()),
        ServerMessage::Verdict { .. } => return Err("the server sent a verdict before the test".into()),
    };

    print_banner(
        parameters,
        &name,
        &port,
        Some(&ClientSettings {
            tx_depth,
            cq_mod,
            inline: if inline { inline_size } else { 0 },
            streams_log: streams.map(|s| s.log_num_concurrent),
        }),
    );
    println!(
        " local address:  LID {:#06x} {} GID {}",
        port.lid,
        qp_numbers_text(&qp_numbers),
        Ipv6Addr::from(port.gid)
    );
    for target in remote.targets.iter().take(LISTED) {
        let endpoint = &target.endpoint;
        println!(
            " remote address: LID {:#06x} DCTN {:#08x} DC key {:#018x} RKey {:#010x} VAddr {:#018x} GID {}",
            endpoint.lid(),
            endpoint.dct_number(),
            endpoint.dc_key(),
            target.rkey,
            target.addr,
            Ipv6Addr::from(endpoint.gid())
        );
    }
    if remote.targets.len() > LISTED {
        println!(
            " remote address: … and {} more DC targets",
            remote.targets.len() - LISTED
        );
    }
    println!("{RESULT_LINE}");

    // One address handle per target, kept until every request completed (the pool keeps its
    // own, created on each target's first post).
    let mut ahs = Vec::new();
    let (report, destinations) = match &mut initiators {
        Initiators::Single(dci, cq) => {
            for (index, target) in remote.targets.iter().enumerate() {
                ahs.push(
                    target
                        .endpoint
                        .create_ah(&pd, port.number, port.gid_index)
                        .map_err(|e| {
                            format!(
                                "Couldn't create the address handle of {}: {}",
                                target_name(index, parameters.targets),
                                report(&e)
                            )
                        })?,
                );
            }
            let mut single = SingleInitiator {
                dci,
                cq,
                ahs: &ahs,
                remote: &remote,
                mode: parameters.mode,
                completed: vec![0; remote.targets.len()],
            };
            let report = if parameters.bw {
                Report::Bandwidth(run_bandwidth(
                    &mut single,
                    &buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                    tx_depth,
                    cq_mod,
                )?)
            } else {
                Report::Latency(run_latency(
                    &mut single,
                    &remote,
                    &mut buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                )?)
            };
            (report, single.counts())
        },
        Initiators::Pool(pool) => {
            let mut pooled = PoolInitiators::new(pool, &remote, parameters.mode);
            let report = if parameters.bw {
                Report::Bandwidth(run_pool_bandwidth(
                    &mut pooled,
                    &buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                    cq_mod,
                    cqe - 1,
                )?)
            } else {
                Report::Latency(run_latency(
                    &mut pooled,
                    &remote,
                    &mut buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                )?)
            };
            (report, pooled.counts())
        },
    };
    let destinations = parameters.counts_destinations().then_some(destinations);
    print_report(&report, destinations.as_ref(), args.report_gbits);
    channel.send(&Done { report, destinations })?;
    match channel.receive("the server's verdict")? {
        ServerMessage::Verdict { ok: true, detail } => println!(" server check: ok: {detail}"),
        ServerMessage::Verdict { ok: false, detail } => {
            return Err(format!("the server's check failed: {detail}").into())
        },
        other => return Err(format!("expected the server's verdict, got {other:?}").into()),
    }
    // Destroy in order: address handles, DC initiators (the pool's address handles with it) and
    // their CQ, memory region, PD; the buffer, then the context.
    drop(ahs);
    drop(initiators);
    drop(mr);
    drop(pd);
    drop(buffer);
    drop(ctx);
    Ok(())
}
