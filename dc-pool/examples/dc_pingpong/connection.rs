//! What the two sides exchange over TCP (JSON lines), the registered buffer and its data
//! pattern, and opening the mlx5 device and its port.
use super::*;

/// The client's first message.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) parameters: TestParameters,
    /// The client's DC initiators (one, or the pool's) and port, for the "remote address" line.
    pub(crate) qp_numbers: Vec<u32>,
    pub(crate) lid: u16,
    pub(crate) gid: Ipv6Addr,
}

/// One of the server's DC targets, as the client addresses it: its endpoint, and the region of
/// `len` bytes at `addr` its requests write and read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TargetAddress {
    pub(crate) endpoint: DcEndpoint,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

/// What the server tells the client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ServerMessage {
    /// The server's DC targets and their regions, each of `slots` slots of `size` bytes.
    Ready {
        targets: Vec<TargetAddress>,
        slots: u32,
        /// The seed of the data patterns (what the client writes and sends, what it reads).
        seed: u64,
    },
    /// The client's parameters differ from the server's.
    Refused { reason: String },
    /// The server's check of what arrived, after the client's report.
    Verdict { ok: bool, detail: String },
}

/// The client's report once its requests completed.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Done {
    pub(crate) report: Report,
    /// With more than one target or a pool.
    pub(crate) destinations: Option<DestinationCounts>,
}

/// One JSON value per line, each way.
pub(crate) struct Channel {
    pub(crate) reader: BufReader<TcpStream>,
    pub(crate) writer: TcpStream,
}

impl Channel {
    pub(crate) fn new(stream: TcpStream) -> Result<Self> {
        let writer = stream.try_clone().map_err(|e| format!("TCP: {e}"))?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
        })
    }

    pub(crate) fn send(&mut self, message: &impl Serialize) -> Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| format!("TCP: cannot send to the peer: {e}"))?;
        Ok(())
    }

    pub(crate) fn receive<T: DeserializeOwned>(&mut self, what: &str) -> Result<T> {
        let mut line = String::new();
        let read = (&mut self.reader)
            .take(MAX_MESSAGE)
            .read_line(&mut line)
            .map_err(|e| format!("TCP: cannot read {what} from the peer: {e}"))?;
        if read == 0 {
            return Err(format!("the peer closed the connection before sending {what}").into());
        }
        if !line.ends_with('\n') {
            return Err(format!("{what} from the peer is cut short or longer than {MAX_MESSAGE} bytes").into());
        }
        serde_json::from_str(&line)
            .map_err(|e| format!("invalid {what} from the peer: {e}: {:?}", line.trim_end()).into())
    }

    /// Without waiting: whether the peer closed the connection (pending data is left unread).
    pub(crate) fn peer_closed(&mut self) -> bool {
        if !self.reader.buffer().is_empty() {
            return false;
        }
        let stream = self.reader.get_ref();
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let closed = matches!(stream.peek(&mut byte), Ok(0));
        let _ = stream.set_nonblocking(false);
        closed
    }
}

/// A page-aligned, zeroed allocation that the device reads and writes. Its bytes are only ever
/// reached through its raw pointer, never through a Rust reference, since the device may write
/// them at any time.
pub(crate) struct Buffer {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) layout: Layout,
}

impl Buffer {
    pub(crate) fn new(len: u64) -> Result<Self> {
        if len == 0 || len > MAX_BUFFER {
            return Err(format!("a buffer of {len} bytes is not possible (at most {MAX_BUFFER})").into());
        }
        // SAFETY: sysconf has no preconditions.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        let layout = Layout::from_size_align(len as usize, page_size)?;
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| format!("cannot allocate a buffer of {len} bytes"))?;
        Ok(Self { ptr, layout })
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    pub(crate) fn addr(&self, offset: usize) -> u64 {
        assert!(offset <= self.len());
        self.ptr.as_ptr() as u64 + offset as u64
    }

    /// Copies `out.len()` bytes from `offset` out of the buffer.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(offset.checked_add(out.len()).is_some_and(|end| end <= self.len()));
        // SAFETY: in bounds (checked); `out` is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
    }

    /// Copies `data` into the buffer at `offset`; only while no request uses those bytes.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.len()));
        // SAFETY: in bounds (checked); `data` is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) };
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the memory region registered on it was
        // dropped before (it is declared after the buffer wherever both live).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// The data of message `iteration` under `seed`: splitmix64 of the pair, 8 bytes at a time. The
/// client fills what it writes and sends with it and the server checks it; the server fills its
/// read slots with it (slot number as the iteration) and the client checks what it read.
pub(crate) fn fill_pattern(seed: u64, iteration: u64, out: &mut [u8]) {
    let base = seed ^ iteration.wrapping_mul(0xd1b5_4a32_d192_ed03);
    for (index, chunk) in out.chunks_mut(8).enumerate() {
        let mut z = base.wrapping_add((index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}

/// The first byte of `data` that differs from the pattern, as (offset, found, expected).
pub(crate) fn pattern_mismatch(
    seed: u64, iteration: u64, data: &[u8], scratch: &mut Vec<u8>,
) -> Option<(usize, u8, u8)> {
    scratch.resize(data.len(), 0);
    fill_pattern(seed, iteration, scratch);
    data.iter()
        .zip(scratch.iter())
        .position(|(found, expected)| found != expected)
        .map(|offset| (offset, data[offset], scratch[offset]))
}

/// The local port as this test uses it.
pub(crate) struct Port {
    pub(crate) number: u8,
    pub(crate) lid: u16,
    pub(crate) roce: bool,
    /// The path MTU both sides bring their DC queue pairs up with: `-m`, no larger than the
    /// port's active MTU, or that.
    pub(crate) mtu: Mtu,
    /// The GID index given with -g (0 on InfiniBand without it).
    pub(crate) gid_index: u8,
    pub(crate) gid: Gid,
}

pub(crate) fn mtu_bytes(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

/// The path MTU of `bytes`, one of the five [`parse_mtu`] takes.
pub(crate) fn mtu_of_bytes(bytes: u32) -> Option<Mtu> {
    [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096]
        .into_iter()
        .find(|&mtu| mtu_bytes(mtu) == bytes)
}

/// Why this client's DC initiators, at path MTU `own`, cannot run `parameters`' test against
/// targets whose endpoints announce `targets` (`None`: the server did not say); `None` when they
/// can. Checked before any request, with the `-m` that fixes it:
///
/// - a target at a smaller MTU drops the larger packets the initiators send (a pool refuses such
///   a destination, `PathMtuTooSmall`);
/// - a target at a larger MTU answers a READ longer than `own` in packets the initiators' path
///   drops (the post is refused, `ReadResponsesTooLarge`; `PathMtus::read_fits`).
pub(crate) fn path_mtu_mismatch(own: Mtu, targets: &[Option<Mtu>], parameters: &TestParameters) -> Option<String> {
    let (smallest, largest) = (targets.iter().flatten().min()?, targets.iter().flatten().max()?);
    if *smallest < own {
        return Some(format!(
            "the server's DC targets take packets of at most {} bytes and this client's DC initiators send up to {}: \
             give both sides -m {}",
            mtu_bytes(*smallest),
            mtu_bytes(own),
            mtu_bytes(*smallest)
        ));
    }
    let read = PathMtus::new(own, *largest);
    if parameters.mode == Mode::Read && !read.read_fits(u64::from(parameters.size)) {
        return Some(format!(
            "the server's DC targets answer a {}-byte READ in packets of up to {} bytes, larger than this client's \
             path MTU ({} bytes): give both sides -m {}",
            parameters.size,
            mtu_bytes(*largest),
            mtu_bytes(own),
            mtu_bytes(own)
        ));
    }
    None
}

/// Opens the device of `-d` (or the first one) and checks that it is an mlx5 device before
/// anything else: DC exists only there.
pub(crate) fn open_mlx5_device(args: &Args) -> Result<(Arc<DeviceContext>, String)> {
    let devices = DeviceList::new().map_err(|e| format!("Failed to get IB devices list: {}", report(&e)))?;
    let device = match &args.ib_dev {
        Some(name) => devices
            .iter()
            .find(|d| d.name() == *name)
            .ok_or_else(|| format!("IB device {name} not found"))?,
        None => devices.iter().next().ok_or("No IB devices found")?,
    };
    let name = device.name();
    let ctx = device
        .open()
        .map_err(|e| format!("Couldn't get context for {name}: {}", report(&e)))?;
    match Mlx5DeviceContext::new(Arc::clone(&ctx)).query_device() {
        Ok(_) => Ok((ctx, name)),
        Err(err) if err.is_not_supported() => Err(not_mlx5(&name).into()),
        Err(err) => Err(format!("{name}: mlx5dv_query_device failed: {}", report(&err)).into()),
    }
}

/// The message for a device that is not mlx5 (or a host without libmlx5).
pub(crate) fn not_mlx5(name: &str) -> String {
    format!(
        "{name}: not an mlx5 device (or libmlx5 is missing): DC needs an NVIDIA/Mellanox ConnectX-4 or newer \
         with rdma-core's libmlx5"
    )
}

pub(crate) fn query_local_port(ctx: &DeviceContext, name: &str, args: &Args) -> Result<Port> {
    let number = args.ib_port;
    let attr = ctx
        .query_port(number)
        .map_err(|e| format!("{name}: couldn't get port {number} info: {}", report(&e)))?;
    let roce = matches!(attr.link_layer(), LinkLayer::Ethernet);
    let gid_index = match (args.gid_idx, roce) {
        (Some(index), _) => index,
        (None, false) => 0,
        (None, true) => {
            return Err(format!(
                "{name} port {number} is RoCE: give -g/--gid-idx, the index of a RoCE v2 GID (mlx5_devinfo lists them)"
            )
            .into())
        },
    };
    let gid = ctx.query_gid(number, gid_index.into()).map_err(|e| {
        format!(
            "{name}: could not get local gid for gid index {gid_index}: {}",
            report(&e)
        )
    })?;
    if !roce && attr.lid() == 0 {
        return Err(format!("{name} port {number}: no LID (is the port up and the subnet manager running?)").into());
    }
    let active = attr.active_mtu();
    // perftest's `set_mtu`: no larger than the port's active MTU.
    let mtu = match args.mtu.and_then(mtu_of_bytes) {
        Some(asked) if asked > active => {
            println!(
                " -m {}: above {name} port {number}'s active MTU, {} bytes used",
                mtu_bytes(asked),
                mtu_bytes(active)
            );
            active
        },
        Some(asked) => asked,
        None => active,
    };
    Ok(Port {
        number,
        lid: attr.lid(),
        roce,
        mtu,
        gid_index,
        gid,
    })
}

pub(crate) fn connect(server: &str, port: u16) -> Result<TcpStream> {
    let addrs = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {server}:{port}"))?;
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr) {
            Ok(stream) => return Ok(stream),
            Err(err) => last = Some(err),
        }
    }
    Err(match last {
        Some(err) => format!("Couldn't connect to {server}:{port}: {err}"),
        None => format!("Couldn't connect to {server}:{port}: no address"),
    }
    .into())
}

/// The DCI streams of the streams policy: `--streams`, or the default capped at the device's
/// maximum; a plain message on a device without DCI streams.
pub(crate) fn dci_streams(ctx: &Arc<DeviceContext>, name: &str, log: Option<u8>) -> Result<DciStreams> {
    let capabilities = Mlx5DeviceContext::new(Arc::clone(ctx))
        .query_dc_capabilities()
        .map_err(|e| format!("{name}: mlx5dv_query_device failed: {}", report(&e)))?;
    let Some(caps) = capabilities.dci_streams() else {
        return Err(no_dci_streams(name).into());
    };
    let log_num_concurrent = match log {
        Some(log) if log > caps.max_log_num_concurrent => {
            return Err(format!(
                "{name}: --streams {log} asks for 2^{log} DCI streams per initiator; the device has at most 2^{}",
                caps.max_log_num_concurrent
            )
            .into())
        },
        Some(log) => log,
        None => DEFAULT_STREAMS_LOG.min(caps.max_log_num_concurrent),
    };
    Ok(DciStreams {
        log_num_concurrent,
        log_num_errored: log_num_concurrent.min(caps.max_log_num_errored),
    })
}

/// The message for `--policy streams` on a device without DCI streams.
pub(crate) fn no_dci_streams(name: &str) -> String {
    format!(
        "{name}: the device has no DCI streams (ConnectX-6 Dx or newer has them): --policy streams cannot run here; \
         use dedicated, quota:<Q> or static"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parameters(mode: Mode, size: u32) -> TestParameters {
        TestParameters {
            mode,
            size,
            iters: 1,
            bw: false,
            targets: 2,
            pool: None,
            mtu: None,
        }
    }

    #[test]
    fn a_server_at_another_mtu_is_refused_with_the_m_that_fixes_it() {
        let (small, large) = (Some(Mtu::Mtu1024), Some(Mtu::Mtu4096));
        // Its targets take smaller packets than this client sends: whatever the operation.
        let why = path_mtu_mismatch(Mtu::Mtu4096, &[large, small], &parameters(Mode::Write, 64)).expect("refused");
        assert!(why.contains("at most 1024 bytes") && why.ends_with("-m 1024"), "{why}");
        // They answer READs in larger packets than this client's path takes: a long READ only.
        let why = path_mtu_mismatch(Mtu::Mtu1024, &[large], &parameters(Mode::Read, 65536)).expect("refused");
        assert!(why.contains("up to 4096 bytes") && why.ends_with("-m 1024"), "{why}");
        assert_eq!(
            path_mtu_mismatch(Mtu::Mtu1024, &[large], &parameters(Mode::Read, 1024)),
            None
        );
        assert_eq!(
            path_mtu_mismatch(Mtu::Mtu1024, &[large], &parameters(Mode::Write, 65536)),
            None
        );
        // Alike, or not said (an older server): nothing to refuse.
        assert_eq!(
            path_mtu_mismatch(Mtu::Mtu1024, &[small, small], &parameters(Mode::Read, 65536)),
            None
        );
        assert_eq!(
            path_mtu_mismatch(Mtu::Mtu1024, &[None], &parameters(Mode::Read, 65536)),
            None
        );
    }

    /// The server prints the client's report as the client measured it: every figure crosses
    /// the connection bit for bit. A latency such as 25 ns (0.024999999999999998 µs) is one
    /// that serde_json's default float parser reads a unit in the last place off, which
    /// printed to two decimals is 0.03 on the server and 0.02 on the client.
    #[test]
    fn the_clients_report_reaches_the_server_bit_for_bit() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listen");
        let address = listener.local_addr().expect("address");
        let mut client = Channel::new(TcpStream::connect(address).expect("connect")).expect("client");
        let mut server = Channel::new(listener.accept().expect("accept").0).expect("server");
        for nanoseconds in 1..=2000 {
            let micros = Duration::from_nanos(nanoseconds).as_secs_f64() * 1e6;
            let sent = LatencyReport {
                bytes: 64,
                iterations: 1,
                min: micros,
                max: micros,
                typical: micros,
                average: micros,
                stdev: micros,
                p99: micros,
                p999: micros,
            };
            client
                .send(&Done {
                    report: Report::Latency(sent),
                    destinations: None,
                })
                .expect("send");
            let Done {
                report: Report::Latency(received),
                ..
            } = server.receive::<Done>("the report").expect("receive")
            else {
                panic!("not a latency report");
            };
            let figures =
                |r: &LatencyReport| [r.min, r.max, r.typical, r.average, r.stdev, r.p99, r.p999].map(f64::to_bits);
            assert_eq!(figures(&received), figures(&sent), "{micros:?} µs");
        }
    }

    #[test]
    fn m_takes_the_five_path_mtus_only() {
        for bytes in [256, 512, 1024, 2048, 4096] {
            assert_eq!(parse_mtu(&bytes.to_string()), Ok(bytes));
            assert_eq!(mtu_of_bytes(bytes).map(mtu_bytes), Some(bytes));
        }
        for text in ["1500", "9000", "0", "mtu"] {
            assert!(parse_mtu(text).is_err(), "{text}");
        }
    }
}
