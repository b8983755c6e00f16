//! The seccomp filter live, rule by rule.
//!
//! The calls are built from the executor's own table
//! ([`garuda_supervisor::executor::seccomp::DENIED`]), so the test cannot drift from it: every
//! entry, and for a conditional entry every value of its condition (each namespace bit of
//! `clone`, each terminal ioctl, families outside the `socket`/`socketpair` list), is issued
//! by `garuda-probe syscall` as a raw system call; so are the prologue's x32 numbers and
//! `clone3`. A rule with no driver below fails the test: nothing is skipped silently.
//!
//! One batch of calls runs four times, one sandbox per run:
//!
//! 1. `landlock` and 2. `bubblewrap`: every refused call answers the filter's errno (`EPERM`,
//!    `ENOSYS` for the prologue); every allowed-argument control (the same call with an
//!    argument the condition lets through) answers the kernel's own error, never the filter's.
//! 3. `host`, the control: the kernel's own answer to the same arguments. The arguments are
//!    chosen so that the kernel rejects them harmlessly and differently (`EINVAL`, `EFAULT`,
//!    `EBADF`, `ESRCH`, `ENOSYS` where the kernel lacks the call), and nothing ever succeeds.
//! 4. `host` with the executors' program installed by the probe itself (`--filter`, the bytes
//!    of [`program_bytes`]): the filtered answers again. Runs 3 and 4 differ only by the
//!    program, so a refused call answered differently in 3 and 4 is refused by the program, not
//!    by the kernel.
//!
//! Run 4 matters for the calls whose kernel checks a privilege before its arguments
//! (`pivot_root` and the mount API: `CAP_SYS_ADMIN` over the mount namespace; `reboot`,
//! `swapoff`, `acct`, `kexec_*`, `*_module`: a capability of the initial namespace). Inside a
//! sandbox the command has no capability, so there the kernel alone would also answer `EPERM`;
//! runs 3 and 4 show the program refusing them where the kernel would not. As non-root, runs 3
//! and 4 start with `--userns` (a user and mount namespace of the probe's own), which gives
//! the mount-API checks their privilege; the initial-namespace capabilities cannot be had, and
//! those calls are the listed exceptions ([`SameAsFilter::Privilege`]), shown by the root run.
//!
//! The architecture check (a foreign architecture kills the process) is driven by
//! `garuda-probe i386-getpid` (`int 0x80`): killed by `SIGSYS` in both sandboxes, `ok` on the
//! host.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // helpers shared with the contract suite; this one uses a few
mod util;

use std::collections::BTreeMap;
use std::ffi::OsString;

use garuda_supervisor::executor::seccomp::{program, program_bytes, Denied, When, DENIED};
use garuda_supervisor::executor::select::executor_of;
use garuda_supervisor::executor::{CommandSpec, ExecutorKind, ExitStatus, StdioMode};
use util::{is_root, Fixture, PROBE};

/// The name under which [`util::ALLOW_NOT_TESTED`] accepts this test's `NOT TESTED` cases.
const NOT_TESTED_CASE: &str = "seccomp-rules";

const SANDBOXES: [ExecutorKind; 2] = [ExecutorKind::Landlock, ExecutorKind::Bubblewrap];

/// Why the kernel's own answer can be the filter's answer (so the host is no control there).
#[derive(Debug, Clone, Copy)]
enum SameAsFilter {
    /// The kernel checks this capability before it looks at the arguments: a process without
    /// it gets `EPERM` whatever the filter does. `in_own_userns`: the probe's own user and
    /// mount namespace (`--userns`) grants it (a capability over the mount namespace), so a
    /// non-root run has it too; otherwise it is one of the initial namespace.
    Privilege {
        cap: u32,
        name: &'static str,
        in_own_userns: bool,
    },
    /// A kernel without the x32 ABI answers `ENOSYS` to every x32 number itself: there is no
    /// x32 way around the table to stop, and the prologue's branch is checked instruction by
    /// instruction by `seccomp::tests::every_rule_in_the_interpreter`.
    NoX32,
}

/// What the filter does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    /// Refused with this errno.
    Refuses(&'static str),
    /// Let through (an allowed-argument control).
    Allows,
}

/// One call of the batch.
#[derive(Debug, Clone)]
struct Call {
    /// `rule: what`.
    label: String,
    /// The probe's spec: `NR,ARG,...`.
    spec: String,
    filter: Filter,
    /// The kernel's own answers to these arguments (without the filter), and why.
    kernel: &'static [&'static str],
    why: &'static str,
    same_as_filter: Option<SameAsFilter>,
}

const CAP_SYS_MODULE: u32 = 16;
const CAP_SYS_PACCT: u32 = 20;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_BOOT: u32 = 22;

fn spec(nr: i64, args: &[String]) -> String {
    std::iter::once(nr.to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(",")
}

/// Arguments for an unconditional rule: `(args, kernel answers, why, same_as_filter)`.
type Always = (
    &'static str,
    &'static [&'static str],
    &'static str,
    Option<SameAsFilter>,
);

/// A capability of the initial user namespace, checked first.
fn privilege(cap: u32, name: &'static str) -> Option<SameAsFilter> {
    Some(SameAsFilter::Privilege {
        cap,
        name,
        in_own_userns: false,
    })
}

/// `CAP_SYS_ADMIN` over the caller's mount namespace, checked first.
fn mount_admin() -> Option<SameAsFilter> {
    Some(SameAsFilter::Privilege {
        cap: CAP_SYS_ADMIN,
        name: "CAP_SYS_ADMIN over the mount namespace",
        in_own_userns: true,
    })
}

/// The arguments of each unconditional rule, chosen so that the kernel itself rejects them
/// without doing anything.
fn always_args(name: &str) -> Option<Always> {
    Some(match name {
        "ptrace" => (
            "0x4206,0x7fffffff,0,0",
            &["ESRCH"],
            "PTRACE_SEIZE of a pid that cannot exist: looked up before any permission check",
            None,
        ),
        "process_vm_readv" | "process_vm_writev" => (
            "0,0,0,0,0,1",
            &["EINVAL"],
            "flags must be 0, checked before the pid or the vectors",
            None,
        ),
        "io_uring_setup" => ("0,0", &["EFAULT"], "the parameters pointer is NULL", None),
        "io_uring_enter" => ("-1,0,0,0,0,0", &["EBADF"], "fd -1", None),
        "io_uring_register" => (
            "-1,0,0,0",
            &["EINVAL", "EBADF"],
            "fd -1 with no arguments",
            None,
        ),
        "userfaultfd" => (
            "3",
            &["EINVAL"],
            "UFFD_USER_MODE_ONLY (allowed to every user) with an unknown flag bit",
            None,
        ),
        "perf_event_open" => (
            "0,0,-1,-1,0",
            &["EFAULT"],
            "the attribute pointer is NULL",
            None,
        ),
        "bpf" => (
            "0xffff,0,0",
            &["EINVAL"],
            "an unknown command with no attributes",
            None,
        ),
        "keyctl" => (
            "0x7fffffff,0,0,0,0",
            &["EOPNOTSUPP"],
            "an unknown operation",
            None,
        ),
        "add_key" => ("0,0,0,0,0", &["EFAULT"], "the type pointer is NULL", None),
        "request_key" => ("0,0,0,0", &["EFAULT"], "the type pointer is NULL", None),
        "unshare" => (
            "0x80000000",
            &["EINVAL"],
            "CLONE_IO is not an unshare flag",
            None,
        ),
        "setns" => ("-1,0", &["EBADF"], "fd -1", None),
        "mount" => (
            "0,0,0,0,0",
            &["EFAULT"],
            "the target path is NULL (looked up before the privilege check)",
            None,
        ),
        "umount2" => (
            "0,0xffff0000",
            &["EINVAL"],
            "unknown flags, checked first",
            None,
        ),
        "pivot_root" => (
            "0,0",
            &["EFAULT", "EPERM"],
            "NULL paths; without CAP_SYS_ADMIN over the mount namespace, checked first: EPERM",
            mount_admin(),
        ),
        "fsopen" => (
            "0,0xff",
            &["EINVAL", "EPERM"],
            "unknown flags; without CAP_SYS_ADMIN over the mount namespace, checked first: EPERM",
            mount_admin(),
        ),
        "fsconfig" => ("-1,0,0,0,0", &["EINVAL"], "fd -1", None),
        "fsmount" => (
            "-1,0xff,0",
            &["EINVAL", "EPERM"],
            "unknown flags; without CAP_SYS_ADMIN over the mount namespace, checked first: EPERM",
            mount_admin(),
        ),
        "fspick" => (
            "-1,0,0xffff",
            &["EINVAL", "EPERM"],
            "unknown flags; without CAP_SYS_ADMIN over the mount namespace, checked first: EPERM",
            mount_admin(),
        ),
        "open_tree" => ("-1,0,0xffffffff", &["EINVAL"], "unknown flags", None),
        "move_mount" => (
            "-1,0,-1,0,0xffffffff",
            &["EINVAL", "EPERM"],
            "unknown flags; without CAP_SYS_ADMIN over the mount namespace, checked first: EPERM",
            mount_admin(),
        ),
        "mount_setattr" => ("-1,0,0xffffffff,0,0", &["EINVAL"], "unknown flags", None),
        "open_by_handle_at" => (
            "-1,0,0",
            &["EFAULT", "EBADF"],
            "the handle pointer is NULL and the mount fd -1",
            None,
        ),
        "name_to_handle_at" => ("-1,0,0,0,0xffffffff", &["EINVAL"], "unknown flags", None),
        "kexec_load" => (
            "0,0,0,0xffffffff",
            &["ENOSYS", "EINVAL", "EPERM"],
            "ENOSYS without CONFIG_KEXEC; else unknown flags (EINVAL) after CAP_SYS_BOOT (EPERM)",
            privilege(CAP_SYS_BOOT, "CAP_SYS_BOOT"),
        ),
        "kexec_file_load" => (
            "-1,-1,0,0,0xffffffff",
            &["ENOSYS", "EINVAL", "EPERM"],
            "ENOSYS without CONFIG_KEXEC_FILE; else unknown flags (EINVAL) after CAP_SYS_BOOT \
             (EPERM)",
            privilege(CAP_SYS_BOOT, "CAP_SYS_BOOT"),
        ),
        "init_module" => (
            "0,0,0",
            &["ENOSYS", "ENOEXEC", "EPERM"],
            "ENOSYS without CONFIG_MODULES; else an empty image (ENOEXEC) after CAP_SYS_MODULE \
             (EPERM)",
            privilege(CAP_SYS_MODULE, "CAP_SYS_MODULE"),
        ),
        "finit_module" => (
            "-1,0,0",
            &["ENOSYS", "EBADF", "EPERM"],
            "ENOSYS without CONFIG_MODULES; else fd -1 (EBADF) after CAP_SYS_MODULE (EPERM)",
            privilege(CAP_SYS_MODULE, "CAP_SYS_MODULE"),
        ),
        "delete_module" => (
            "0,0",
            &["ENOSYS", "EFAULT", "EPERM"],
            "ENOSYS without CONFIG_MODULES; else a NULL name (EFAULT) after CAP_SYS_MODULE (EPERM)",
            privilege(CAP_SYS_MODULE, "CAP_SYS_MODULE"),
        ),
        "reboot" => (
            "0,0,0,0",
            &["EINVAL", "EPERM"],
            "wrong magic numbers (EINVAL) after CAP_SYS_BOOT (EPERM)",
            privilege(CAP_SYS_BOOT, "CAP_SYS_BOOT"),
        ),
        "swapon" => (
            "0,0xffffffff",
            &["EINVAL"],
            "unknown flags, checked before the privilege",
            None,
        ),
        "swapoff" => (
            "0",
            &["EFAULT", "EPERM"],
            "a NULL path (EFAULT) after CAP_SYS_ADMIN (EPERM)",
            privilege(CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        ),
        "acct" => (
            // 1, not NULL: acct(NULL) would switch accounting off.
            "1",
            &["EFAULT", "EPERM"],
            "a bad path pointer (EFAULT) after CAP_SYS_PACCT (EPERM)",
            privilege(CAP_SYS_PACCT, "CAP_SYS_PACCT"),
        ),
        "quotactl" => (
            "0xff,0,0,0",
            &["EINVAL"],
            "quota type 255 does not exist, checked first",
            None,
        ),
        "fanotify_init" => (
            "0x10000200,0",
            &["EINVAL"],
            "FAN_REPORT_FID (allowed to every user) with an unknown flag bit",
            None,
        ),
        _ => return None,
    })
}

/// Families outside the `socket`/`socketpair` list that the test tries.
const OUTSIDE_FAMILIES: &[(u64, &str)] = &[
    (libc::AF_UNSPEC as u64, "AF_UNSPEC"),
    (libc::AF_NETLINK as u64, "AF_NETLINK"),
    (libc::AF_PACKET as u64, "AF_PACKET"),
    (libc::AF_ALG as u64, "AF_ALG"),
    (libc::AF_VSOCK as u64, "AF_VSOCK"),
    (0xffff_ffff, "-1"),
];

/// Every call for one rule of the table, or `None` when the test has no driver for it.
fn drive(d: &Denied) -> Option<Vec<Call>> {
    let refused = |what: String, args: Vec<String>, kernel, why| Call {
        label: format!("{}: {what}", d.name),
        spec: spec(d.nr, &args),
        filter: Filter::Refuses("EPERM"),
        kernel,
        why,
        same_as_filter: None,
    };
    let allowed = |what: String, args: Vec<String>, kernel, why| Call {
        label: format!("{}: {what} (allowed-argument control)", d.name),
        spec: spec(d.nr, &args),
        filter: Filter::Allows,
        kernel,
        why,
        same_as_filter: None,
    };
    let hex = |v: u64| format!("{v:#x}");
    let sighand = libc::CLONE_SIGHAND as u64;
    Some(match (d.name, d.when) {
        (name, When::Always) => {
            let (args, kernel, why, same) = always_args(name)?;
            let mut call = refused("always".into(), vec![args.to_string()], kernel, why);
            call.same_as_filter = same;
            vec![call]
        }
        ("clone", When::ArgHasAnyBit(0, bits)) => {
            // CLONE_SIGHAND without CLONE_VM: the kernel refuses the combination (EINVAL)
            // before it looks at namespaces, so nothing is ever created.
            let why = "CLONE_SIGHAND without CLONE_VM, refused before anything is created";
            let mut calls: Vec<Call> = bits
                .iter()
                .map(|b| {
                    refused(
                        format!("flags {b:#x} | CLONE_SIGHAND"),
                        vec![
                            hex(b | sighand),
                            "0".into(),
                            "0".into(),
                            "0".into(),
                            "0".into(),
                        ],
                        &["EINVAL"],
                        why,
                    )
                })
                .collect();
            calls.push(allowed(
                "flags CLONE_SIGHAND, no namespace bit".into(),
                vec![hex(sighand), "0".into(), "0".into(), "0".into(), "0".into()],
                &["EINVAL"],
                why,
            ));
            calls
        }
        (name @ ("socket" | "socketpair"), When::ArgNotIn(0, families)) => {
            // Type 0xff has unknown flag bits: the kernel refuses it (EINVAL) before it looks at
            // the family, so no socket is made. socketpair also gets a valid result buffer.
            let why = "type 0xff has unknown flag bits, checked before the family";
            let tail: Vec<String> = if name == "socketpair" {
                vec!["0xff".into(), "0".into(), "buf".into()]
            } else {
                vec!["0xff".into(), "0".into()]
            };
            let with = |family: u64| std::iter::once(hex(family)).chain(tail.clone()).collect();
            let mut calls = Vec::new();
            for (family, fname) in OUTSIDE_FAMILIES {
                assert!(
                    !families.contains(family),
                    "{fname} is in the allowed list; pick another outside value"
                );
                calls.push(refused(
                    format!("family {fname}"),
                    with(*family),
                    &["EINVAL"],
                    why,
                ));
            }
            for family in families {
                calls.push(allowed(
                    format!("family {family}"),
                    with(*family),
                    &["EINVAL"],
                    why,
                ));
            }
            calls
        }
        ("ioctl", When::ArgEq(1, requests)) => {
            let why = "fd -1";
            let mut calls: Vec<Call> = requests
                .iter()
                .map(|r| {
                    refused(
                        format!("request {r:#x}"),
                        vec!["-1".into(), hex(*r), "0".into()],
                        &["EBADF"],
                        why,
                    )
                })
                .collect();
            // The kernel reads the request as 32 bits and so does the filter: high bits do not
            // get a terminal ioctl past it.
            calls.extend(requests.iter().map(|r| {
                refused(
                    format!("request {r:#x} with high bits set"),
                    vec!["-1".into(), hex(r | (1 << 32)), "0".into()],
                    &["EBADF"],
                    why,
                )
            }));
            #[allow(clippy::unnecessary_cast)] // the request type differs between C libraries
            let tcgets = libc::TCGETS as u64;
            calls.push(allowed(
                format!("request TCGETS {tcgets:#x}"),
                vec!["-1".into(), hex(tcgets), "0".into()],
                &["EBADF"],
                why,
            ));
            calls
        }
        _ => return None,
    })
}

/// The prologue's calls: x32 numbers (x86-64) and `clone3`.
fn prologue_calls() -> Vec<Call> {
    let mut calls = Vec::new();
    if cfg!(target_arch = "x86_64") {
        const X32: i64 = 0x4000_0000;
        calls.push(Call {
            label: "prologue: x32 getpid".into(),
            spec: format!("{:#x}", X32 | libc::SYS_getpid),
            filter: Filter::Refuses("ENOSYS"),
            kernel: &["ok", "ENOSYS"],
            why: "ok with the x32 ABI; ENOSYS without it",
            same_as_filter: Some(SameAsFilter::NoX32),
        });
        calls.push(Call {
            label: "prologue: x32 ptrace (521), the table's ptrace under another number".into(),
            spec: format!("{:#x},0x4206,0x7fffffff,0,0", X32 | 521),
            filter: Filter::Refuses("ENOSYS"),
            kernel: &["ESRCH", "ENOSYS"],
            why: "a pid that cannot exist with the x32 ABI; ENOSYS without it",
            same_as_filter: Some(SameAsFilter::NoX32),
        });
    }
    for (what, args) in [
        ("NULL, size 0", "0,0"),
        ("a zeroed buffer, size 8", "buf,8"),
    ] {
        calls.push(Call {
            label: format!("prologue: clone3 with {what}"),
            spec: format!("{},{args}", libc::SYS_clone3),
            filter: Filter::Refuses("ENOSYS"),
            kernel: &["EINVAL"],
            why: "a size below CLONE_ARGS_SIZE_VER0",
            same_as_filter: None,
        });
    }
    calls
}

/// Every call: the table's rules, then the prologue.
fn all_calls() -> Vec<Call> {
    let mut calls = Vec::new();
    let mut undriven = Vec::new();
    for d in DENIED {
        match drive(d) {
            Some(c) => calls.extend(c),
            None => undriven.push(format!("{} ({:?})", d.name, d.when)),
        }
    }
    assert!(
        undriven.is_empty(),
        "rules of the table with no driver in this test (every rule must be exercised): {}",
        undriven.join(", ")
    );
    calls.extend(prologue_calls());
    calls
}

/// Whether this process has `cap` in its effective set.
fn has_cap(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap() & (1 << cap) != 0
}

/// Run the probe on `kind` with `pre` (setup options) and every spec; the answers by spec.
fn run_batch(
    kind: ExecutorKind,
    fx: &Fixture,
    pre: &[OsString],
    calls: &[Call],
) -> BTreeMap<String, String> {
    let argv: Vec<OsString> = [OsString::from(PROBE), "syscall".into()]
        .into_iter()
        .chain(pre.iter().cloned())
        .chain(calls.iter().map(|c| OsString::from(&c.spec)))
        .collect();
    let out = executor_of(kind)
        .run(&CommandSpec::new(argv), &fx.policy, StdioMode::Capture)
        .unwrap_or_else(|e| panic!("{kind} could not run the probe: {e}"));
    let text = out.stdout.text();
    assert!(
        out.status == ExitStatus::Code(0) && out.stderr.bytes.is_empty(),
        "{kind}: the probe did not run cleanly: {:?}, stdout {text:?}, stderr {:?}",
        out.status,
        out.stderr.text()
    );
    let mut answers = BTreeMap::new();
    for line in text.lines() {
        let (spec, answer) = line.split_once(' ').unwrap();
        let answer = answer.strip_prefix("errno=").unwrap_or(answer);
        answers.insert(spec.to_string(), answer.to_string());
    }
    for c in calls {
        assert!(
            answers.contains_key(&c.spec),
            "{kind}: no answer for {}",
            c.label
        );
    }
    answers
}

/// The sandboxes answer every call as the filter says; the host, with and without the
/// executors' program, shows that the program is what answers.
#[test]
fn every_seccomp_rule_is_enforced_live_with_its_control() {
    let calls = all_calls();
    let fx = Fixture::new("seccomp-rules");
    let filter_file = fx.base.join("filter.bpf");
    std::fs::write(&filter_file, program_bytes(&program().unwrap())).unwrap();
    // As non-root, the host's runs start in a user and mount namespace of the probe's own
    // (see the module documentation).
    let userns: Vec<OsString> = if is_root() {
        vec![]
    } else {
        vec!["--userns".into()]
    };
    let host = run_batch(ExecutorKind::Host, &fx, &userns, &calls);
    let filtered = {
        let mut pre = userns.clone();
        pre.extend(["--filter".into(), filter_file.clone().into_os_string()]);
        run_batch(ExecutorKind::Host, &fx, &pre, &calls)
    };
    if !userns.is_empty() {
        for answers in [&host, &filtered] {
            assert_eq!(
                answers["userns"], "ok",
                "host: the probe could not enter a user namespace"
            );
        }
    }
    assert_eq!(
        filtered["filter"], "ok",
        "host: the probe could not install the program"
    );
    let sandboxes: Vec<(ExecutorKind, BTreeMap<String, String>)> = SANDBOXES
        .iter()
        .map(|k| (*k, run_batch(*k, &fx, &[], &calls)))
        .collect();

    // Whether the host's probe holds a privilege: its own, or the one its namespace gives.
    let in_own_namespace = !userns.is_empty();
    let holds = |cap: u32, in_own_userns: bool| has_cap(cap) || (in_own_userns && in_own_namespace);
    let mut failures = Vec::new();
    let mut not_tested = Vec::new();
    for c in &calls {
        let h = &host[&c.spec];
        let f = &filtered[&c.spec];
        eprintln!(
            "seccomp-rules: {:<60} host {h:<10} host+filter {f:<8} {}",
            c.label,
            sandboxes
                .iter()
                .map(|(k, a)| format!("{k} {}", a[&c.spec]))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if !c.kernel.contains(&h.as_str()) {
            failures.push(format!(
                "{}: the host answered {h}, expected one of {:?} ({})",
                c.label, c.kernel, c.why
            ));
        }
        match c.filter {
            Filter::Refuses(errno) => {
                for (kind, answers) in &sandboxes {
                    if answers[&c.spec] != errno {
                        failures.push(format!(
                            "{}: {kind} answered {}, the filter refuses with {errno}",
                            c.label, answers[&c.spec]
                        ));
                    }
                }
                if f != errno {
                    failures.push(format!(
                        "{}: the host with the program answered {f}, expected {errno}",
                        c.label
                    ));
                }
                if h == errno {
                    // The control cannot fail here: say why, or fail.
                    match c.same_as_filter {
                        Some(SameAsFilter::NoX32) if h == "ENOSYS" => eprintln!(
                            "seccomp-rules: {}: this kernel has no x32 ABI and answers ENOSYS \
                             itself, so no x32 call gets around the table here; the prologue's \
                             branch is checked by the BPF interpreter test",
                            c.label
                        ),
                        Some(SameAsFilter::Privilege {
                            cap,
                            name,
                            in_own_userns,
                        }) if !holds(cap, in_own_userns) => {
                            let line = format!(
                                "{}: the kernel checks {name} before the arguments and this \
                                 process lacks it, so the host answers EPERM as well",
                                c.label
                            );
                            if is_root() {
                                // Root without the capability (a container): nobody shows it.
                                not_tested.push(line);
                            } else {
                                eprintln!(
                                    "seccomp-rules: {line}; the root run shows the program \
                                     refusing it where the kernel would not"
                                );
                            }
                        }
                        _ => failures.push(format!(
                            "{}: the host answered {h} too, so this control cannot fail",
                            c.label
                        )),
                    }
                }
            }
            Filter::Allows => {
                for (kind, answers) in &sandboxes {
                    if &answers[&c.spec] != h {
                        failures.push(format!(
                            "{}: {kind} answered {}, the kernel's answer is {h}: the filter \
                             must let this argument through",
                            c.label, answers[&c.spec]
                        ));
                    }
                }
                if f != h {
                    failures.push(format!(
                        "{}: the host with the program answered {f}, without it {h}",
                        c.label
                    ));
                }
                if h == "EPERM" {
                    failures.push(format!(
                        "{}: the allowed-argument control answers EPERM, so it cannot tell \
                         the filter from the kernel",
                        c.label
                    ));
                }
            }
        }
    }
    for line in &not_tested {
        util::say_not_tested(&format!("seccomp-rules: {line}"));
    }
    if !not_tested.is_empty() && !util::not_tested_allowed(NOT_TESTED_CASE) {
        failures.push(format!(
            "{} control(s) NOT TESTED on this machine (set {}={NOT_TESTED_CASE} to accept \
             that)",
            not_tested.len(),
            util::ALLOW_NOT_TESTED
        ));
    }
    assert!(
        failures.is_empty(),
        "{} of {} calls failed:\n  {}",
        failures.len(),
        calls.len(),
        failures.join("\n  ")
    );
}

/// The architecture check: a call through the i386 entry kills the process in both sandboxes
/// (`SIGSYS`); the host answers it.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_foreign_architecture_call_kills_the_process() {
    let fx = Fixture::new("seccomp-arch");
    let argv = vec![OsString::from(PROBE), "i386-getpid".into()];
    let run = |kind: ExecutorKind| {
        executor_of(kind)
            .run(
                &CommandSpec::new(argv.clone()),
                &fx.policy,
                StdioMode::Capture,
            )
            .unwrap_or_else(|e| panic!("{kind} could not run the probe: {e}"))
    };
    // The control first: the host runs the i386 call (IA-32 emulation) and prints `ok`.
    let host = run(ExecutorKind::Host);
    if host.stdout.text() != "ok\n" {
        let line = format!(
            "the i386 entry does not answer on this kernel ({:?}, stdout {:?}): the \
             architecture check has no control here",
            host.status,
            host.stdout.text()
        );
        util::not_tested(NOT_TESTED_CASE, &format!("seccomp-rules: {line}"));
        return;
    }
    for kind in SANDBOXES {
        let out = run(kind);
        let killed = out.status == ExitStatus::Signal(libc::SIGSYS)
            || out.status == ExitStatus::Code(128 + libc::SIGSYS);
        assert!(
            killed && out.stdout.bytes.is_empty(),
            "{kind}: expected the probe killed by SIGSYS, got {:?}, stdout {:?}, stderr {:?}",
            out.status,
            out.stdout.text(),
            out.stderr.text()
        );
    }
}
