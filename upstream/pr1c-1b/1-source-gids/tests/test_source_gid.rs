use std::net::Ipv6Addr;
use std::process::Command;

use sideway::ibverbs::address::GidType;
use sideway::ibverbs::device;
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer};
use sideway::ibverbs::source_gid::{SourceGid, SourceGidErrorKind};

/// On each device's first port: `SourceGid::Automatic` is, on RoCE, a RoCE v2 GID of the port,
/// its IPv4-mapped one (which `ibv_query_gid` reads too), on InfiniBand none; a port the device
/// lacks is refused.
#[test]
fn source_gid_is_the_ipv4_mapped_roce_v2_gid_of_the_port() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    let mut tested = 0;
    for device in &device_list {
        let ctx = device.open()?;
        let roce = ctx.query_port(1)?.link_layer() == Ok(LinkLayer::Ethernet);
        match ctx.source_gid(1, &SourceGid::Automatic)? {
            Some(entry) => {
                assert!(roce, "InfiniBand sends from the LID by default");
                assert_eq!(entry.gid_type(), GidType::RoceV2);
                assert!(!entry.gid().is_zero());
                assert_eq!(ctx.query_gid(1, entry.index().into())?, entry.gid());
                Ipv6Addr::from(entry.gid())
                    .to_ipv4_mapped()
                    .ok_or("a RoCE port with an IPv4 address sends from it")?;
            },
            None => assert!(!roce, "a RoCE port with an IP address has a RoCE v2 GID"),
        }
        let missing = port_after_the_last(&ctx);
        let err = ctx.source_gid(missing, &SourceGid::Automatic).unwrap_err();
        assert!(
            matches!(err.0, SourceGidErrorKind::InvalidPort { port, .. } if port == missing),
            "{err:?}"
        );
        tested += 1;
    }
    assert!(tested > 0, "no RDMA device");
    Ok(())
}

/// On RoCE, a GID by index must be RoCE v2: its RoCE v1 twin (same address, no IP header) and an
/// empty slot are refused.
#[test]
fn source_gid_by_index_refuses_what_is_not_roce_v2() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    for device in &device_list {
        let ctx = device.open()?;
        if ctx.query_port(1)?.link_layer() != Ok(LinkLayer::Ethernet) {
            continue;
        }
        let entry = ctx
            .source_gid(1, &SourceGid::Automatic)?
            .ok_or("a RoCE port with an IP address has a RoCE v2 GID")?;
        let by_index = ctx.source_gid(1, &SourceGid::Index(entry.index()))?;
        assert_eq!(by_index, Some(entry));
        let table = ctx.query_gid_table()?;
        if let Some(v1) = table
            .iter()
            .find(|e| e.port_num() == 1 && e.gid() == entry.gid() && e.gid_type() == GidType::RoceV1)
        {
            let err = ctx.source_gid(1, &SourceGid::Index(v1.gid_index() as u8)).unwrap_err();
            assert!(
                matches!(
                    err.0,
                    SourceGidErrorKind::NotRoceV2 {
                        port: 1,
                        gid_type: GidType::RoceV1,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let empty = (0..=u8::MAX)
            .find(|&index| {
                !table
                    .iter()
                    .any(|e| e.port_num() == 1 && e.gid_index() == u32::from(index))
            })
            .expect("a free slot");
        let err = ctx.source_gid(1, &SourceGid::Index(empty)).unwrap_err();
        assert!(
            matches!(err.0, SourceGidErrorKind::EmptySlot { port: 1, index } if index == empty),
            "{err:?}"
        );
    }
    Ok(())
}

/// What `source_gid` resolves on port 1 of the first device: the default, and each of the first
/// slots by index, as text (entries or errors), to compare one libibverbs with another.
fn resolved_source_gids() -> Result<String, Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    let ctx = device_list.iter().next().ok_or("no RDMA device")?.open()?;
    let selections = std::iter::once(SourceGid::Automatic).chain((0..8).map(SourceGid::Index));
    let resolved: Vec<String> = selections
        .map(|selection| match ctx.source_gid(1, &selection) {
            Ok(entry) => format!("{selection:?}: {entry:?}"),
            Err(err) => format!("{selection:?}: {}", err.0),
        })
        .collect();
    Ok(resolved.join("\n"))
}

/// The path of the libibverbs this process loaded (rdma-mummy-sys opens `libibverbs.so.1`).
fn loaded_libibverbs() -> std::path::PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/libibverbs.so"))
        .map(std::path::PathBuf::from)
        .expect("libibverbs is loaded")
}

/// Set in the run of the test below that a libibverbs without `_ibv_query_gid_ex` serves: what the
/// library with it resolved.
const RESOLVED_WITH_QUERY_GID_EX: &str = "SIDEWAY_TEST_RESOLVED_WITH_QUERY_GID_EX";

/// Source GIDs with a libibverbs that has no `_ibv_query_gid_ex`, as before rdma-core 32: the
/// test runs itself again over a copy of the libibverbs.so.1 it loaded, in which that symbol's
/// name is changed in the dynamic string table (`dlsym` misses it, and rdma-mummy-sys answers
/// `EOPNOTSUPP`, as with an older library), found first through `LD_LIBRARY_PATH`. That run
/// reads the GID table through `ibv_query_gid` and sysfs and must resolve what this one does.
#[test]
fn source_gid_without_ibv_query_gid_ex_reads_the_same_gids_from_sysfs() -> Result<(), Box<dyn std::error::Error>> {
    const NAME: &str = "source_gid_without_ibv_query_gid_ex_reads_the_same_gids_from_sysfs";
    const SYMBOL: &[u8] = b"\0_ibv_query_gid_ex\0";
    const RENAMED: &[u8] = b"\0_ibv_query_gid_eX\0";

    let resolved = resolved_source_gids()?;
    if let Ok(with_symbol) = std::env::var(RESOLVED_WITH_QUERY_GID_EX) {
        // The run over the copy: it is the library loaded, and it lacks the symbol.
        let library = loaded_libibverbs();
        let copies = std::env::var("LD_LIBRARY_PATH")?;
        assert!(library.starts_with(copies.split(':').next().unwrap()), "{library:?}");
        // SAFETY: NUL-terminated names; RTLD_NOLOAD only looks the loaded library up.
        unsafe {
            let handle = libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            assert!(!handle.is_null(), "libibverbs.so.1 is loaded");
            assert!(libc::dlsym(handle, c"_ibv_query_gid_ex".as_ptr()).is_null());
            assert!(!libc::dlsym(handle, c"ibv_query_gid".as_ptr()).is_null());
            libc::dlclose(handle);
        }
        assert_eq!(resolved, with_symbol, "the same source GIDs without _ibv_query_gid_ex");
        return Ok(());
    }
    // The reference: the default resolves (InfiniBand: to none).
    assert!(
        resolved.starts_with("Automatic: Some(") || resolved.starts_with("Automatic: None"),
        "{resolved}"
    );
    let library = loaded_libibverbs();
    let bytes = std::fs::read(&library)?;
    let found = bytes.windows(SYMBOL.len()).filter(|window| *window == SYMBOL).count();
    assert!(
        found > 0,
        "{} has no _ibv_query_gid_ex to hide (rdma-core before 32)",
        library.display()
    );
    let mut renamed = bytes.clone();
    let mut at = 0;
    while let Some(offset) = renamed[at..].windows(SYMBOL.len()).position(|window| window == SYMBOL) {
        renamed[at + offset..at + offset + RENAMED.len()].copy_from_slice(RENAMED);
        at += offset + SYMBOL.len();
    }
    let folder = std::env::temp_dir().join(format!("sideway-old-libibverbs-{}", std::process::id()));
    std::fs::create_dir_all(&folder)?;
    std::fs::write(folder.join("libibverbs.so.1"), &renamed)?;
    let search = match std::env::var("LD_LIBRARY_PATH") {
        Ok(others) if !others.is_empty() => format!("{}:{others}", folder.display()),
        _ => folder.display().to_string(),
    };
    let output = Command::new(std::env::current_exe()?)
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", search)
        .env(RESOLVED_WITH_QUERY_GID_EX, &resolved)
        .output()?;
    std::fs::remove_dir_all(&folder)?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "without _ibv_query_gid_ex ({found} renamed):\n{stdout}\n{stderr}"
    );
    Ok(())
}

/// The first port number above the device's ports.
fn port_after_the_last(ctx: &DeviceContext) -> u8 {
    (2..=u8::MAX)
        .find(|&port| ctx.query_port(port).is_err())
        .expect("a missing port")
}
