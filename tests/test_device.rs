//! First device test: sideway's own objects on the device named by `SIDEWAY_EXT_TEST_DEVICE`.
mod common;

use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::AccessFlags;

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn open_device_alloc_pd_reg_mr_create_cqs() {
    let ctx = common::open_test_device();

    let attr = ctx.query_device().expect("query_device");
    assert!(attr.phys_port_cnt() >= 1, "a device has at least one port");
    assert!(attr.max_qp() > 0 && attr.max_cqe() > 0 && attr.max_mr() > 0);
    let port = ctx.query_port(1).expect("query_port(1)");
    assert!(port.gid_tbl_len() > 0);

    let pd = ctx.alloc_pd().expect("alloc_pd");

    let buffer = vec![0u8; 4096];
    let mr = unsafe {
        pd.reg_mr(
            buffer.as_ptr() as usize,
            buffer.len(),
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
        )
    }
    .expect("reg_mr");
    assert_eq!(mr.region_len(), buffer.len());
    assert_eq!(mr.get_ptr(), buffer.as_ptr() as usize);
    assert_ne!(mr.lkey(), 0);

    let mut builder = ctx.create_cq_builder();
    builder.setup_cqe(64);
    let basic = builder.build().expect("basic CQ");
    let extended = builder.build_ex().expect("extended CQ");

    // Both CQs are new and empty: polling reports exactly that.
    for cq in [
        GenericCompletionQueue::from(basic),
        GenericCompletionQueue::from(extended),
    ] {
        assert!(matches!(
            cq.start_poll(),
            Err(PollCompletionQueueError::CompletionQueueEmpty)
        ));
    }
}

/// `DeviceContextExt::source_gid` picks what the tests address a device by: on rxe0, a RoCE v2
/// port, its IPv4-mapped RoCE v2 GID (never an empty, zero slot), also by its index; a RoCE v1
/// GID by index is refused.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn source_gid_is_the_ipv4_mapped_roce_v2_gid_of_the_port() {
    use sideway::ibverbs::address::GidType;
    use sideway::ibverbs::device_context::LinkLayer;
    use sideway_ext::ibverbs::extension::DeviceContextExt;
    use sideway_ext::ibverbs::source_gid::{SourceGid, SourceGidErrorKind};

    let ctx = common::open_test_device();
    let found = ctx.source_gid(1, &SourceGid::Automatic).expect("query the GID table");
    if ctx.query_port(1).expect("query_port(1)").link_layer() != LinkLayer::Ethernet {
        assert!(found.is_none(), "an InfiniBand port sends from its LID by default");
        return;
    }
    let entry = found.expect("a RoCE port with an IP address has a RoCE v2 GID");
    let (index, gid) = common::local_gid(&ctx);
    assert_eq!((entry.index(), entry.gid()), (index, gid));
    assert!(matches!(entry.gid_type(), GidType::RoceV2) && !entry.gid().is_zero());
    assert!(std::net::Ipv6Addr::from(entry.gid()).to_ipv4_mapped().is_some());
    assert_eq!(ctx.query_gid(1, entry.index().into()).expect("query_gid"), entry.gid());
    // The same GID by its index.
    let by_index = ctx.source_gid(1, &SourceGid::Index(index)).expect("by index");
    assert_eq!(by_index, Some(entry));
    let table = ctx.query_gid_table().expect("the GID table");
    // A RoCE v1 GID of the same address, where the table has one, is refused by index.
    if let Some(v1) = table
        .iter()
        .find(|e| e.port_num() == 1 && e.gid() == gid && matches!(e.gid_type(), GidType::RoceV1))
    {
        let err = ctx.source_gid(1, &SourceGid::Index(v1.gid_index() as u8)).unwrap_err();
        assert!(matches!(err.0, SourceGidErrorKind::NotRoceV2 { .. }), "{err:?}");
    }
    // A port that does not exist is refused.
    let err = ctx.source_gid(2, &SourceGid::Automatic).unwrap_err();
    assert!(
        matches!(err.0, SourceGidErrorKind::InvalidPort { port: 2, .. }),
        "{err:?}"
    );
}

/// What `DeviceContextExt::source_gid` resolves on port 1: the default, and each of the first
/// slots by index, as text (entries or errors), to compare one library with another.
fn resolved_source_gids(ctx: &std::sync::Arc<sideway::ibverbs::device_context::DeviceContext>) -> String {
    use sideway_ext::ibverbs::extension::DeviceContextExt;
    use sideway_ext::ibverbs::source_gid::SourceGid;

    let selections = std::iter::once(SourceGid::Automatic).chain((0..8).map(SourceGid::Index));
    let resolved: Vec<String> = selections
        .map(|selection| match ctx.source_gid(1, &selection) {
            Ok(entry) => format!("{selection:?}: {entry:?}"),
            Err(err) => format!("{selection:?}: {}", err.0),
        })
        .collect();
    resolved.join("\n")
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

/// Set in the run of this test that a libibverbs without `_ibv_query_gid_ex` serves: what the
/// library with it resolved.
const RESOLVED_WITH_QUERY_GID_EX: &str = "SIDEWAY_EXT_TEST_RESOLVED_WITH_QUERY_GID_EX";

/// Source GIDs with a libibverbs that has no `_ibv_query_gid_ex`, as before rdma-core 32: the
/// test runs itself again over a copy of the libibverbs.so.1 it loaded, in which that symbol's
/// name is changed in the dynamic string table (`dlsym` misses it, and rdma-mummy-sys answers
/// `EOPNOTSUPP`, as with an older library), found first through `LD_LIBRARY_PATH`. That run
/// reads the GID table through `ibv_query_gid` and sysfs and must resolve what this one does.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn source_gid_without_ibv_query_gid_ex_reads_the_same_gids_from_sysfs() {
    const NAME: &str = "source_gid_without_ibv_query_gid_ex_reads_the_same_gids_from_sysfs";
    const SYMBOL: &[u8] = b"\0_ibv_query_gid_ex\0";
    const RENAMED: &[u8] = b"\0_ibv_query_gid_eX\0";

    let ctx = common::open_test_device();
    let resolved = resolved_source_gids(&ctx);
    if let Ok(with_symbol) = std::env::var(RESOLVED_WITH_QUERY_GID_EX) {
        // The run over the copy: it is the library loaded, and it lacks the symbol.
        let library = loaded_libibverbs();
        let copies = std::env::var("LD_LIBRARY_PATH").expect("the copy's folder");
        assert!(library.starts_with(copies.split(':').next().unwrap()), "{library:?}");
        // SAFETY: NUL-terminated names; RTLD_NOLOAD only looks the loaded library up.
        unsafe {
            let handle = libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            assert!(!handle.is_null(), "libibverbs.so.1 is loaded");
            assert!(libc::dlsym(handle, c"_ibv_query_gid_ex".as_ptr()).is_null());
            assert!(!libc::dlsym(handle, c"ibv_query_gid".as_ptr()).is_null());
            libc::dlclose(handle);
        }
        let mut entry = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_gid_entry>::zeroed();
        // SAFETY: the context is open; entry is writable.
        let ret = unsafe { rdma_mummy_sys::ibv_query_gid_ex(ctx.context().as_ptr(), 1, 0, entry.as_mut_ptr(), 0) };
        assert_eq!(ret, libc::EOPNOTSUPP, "rdma-mummy-sys' answer for a missing symbol");
        assert_eq!(resolved, with_symbol, "the same source GIDs without _ibv_query_gid_ex");
        return;
    }
    assert!(resolved.contains("Automatic: Some("), "{resolved}");
    let library = loaded_libibverbs();
    let bytes = std::fs::read(&library).expect("read libibverbs");
    let found = bytes.windows(SYMBOL.len()).filter(|window| *window == SYMBOL).count();
    if found == 0 {
        common::skip::report_skip(&format!(
            "{} has no _ibv_query_gid_ex already (rdma-core before 32): every source GID test reads sysfs",
            library.display()
        ));
        return;
    }
    let mut renamed = bytes.clone();
    let mut at = 0;
    while let Some(offset) = renamed[at..].windows(SYMBOL.len()).position(|window| window == SYMBOL) {
        renamed[at + offset..at + offset + RENAMED.len()].copy_from_slice(RENAMED);
        at += offset + SYMBOL.len();
    }
    let folder = std::env::temp_dir().join(format!("sideway-ext-old-libibverbs-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("a temporary folder");
    std::fs::write(folder.join("libibverbs.so.1"), &renamed).expect("write the copy");
    let search = match std::env::var("LD_LIBRARY_PATH") {
        Ok(others) if !others.is_empty() => format!("{}:{others}", folder.display()),
        _ => folder.display().to_string(),
    };
    let output = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([NAME, "--exact", "--include-ignored", "--nocapture"])
        .env("LD_LIBRARY_PATH", search)
        .env(RESOLVED_WITH_QUERY_GID_EX, &resolved)
        .output()
        .expect("run the test again");
    std::fs::remove_dir_all(&folder).expect("remove the copy");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "without _ibv_query_gid_ex ({found} renamed):\n{stdout}\n{stderr}"
    );
}
