//! Namespaces made ahead: the user and network namespaces of the next sandbox (`landlock` or
//! `bubblewrap`), made by a short-lived helper process while the supervisor does its own work.
//!
//! A sandbox's setup (landlock's outer process, bubblewrap's spawn hook) used to start with
//! `unshare` of its namespaces, then write its id maps, bring up loopback and bind the
//! resolver stub's sockets. The network namespace is
//! the largest single cost of that setup (about half a millisecond on the benchmark machine,
//! the user namespace and the rest a few tenths more), and none of it depends on the policy.
//! So `garuda sandbox` calls [`prepare`] first thing (before parsing its arguments), and a
//! helper makes them on the other core while the supervisor loads the policy, the probe cache
//! and the audit session; the broker calls it once a session that runs commands itself
//! starts, and again after each such command has been answered, ready for the next one
//! ([`crate::broker`]). Whatever no sandbox took is [`discard`]ed before the process ends. An
//! executor with the network off then [`take`]s them: landlock's outer joins them with
//! `setns` and makes only the mount, PID, IPC, UTS and cgroup namespaces itself
//! ([`crate::sys::NativePlan::namespaces`]); bubblewrap's hook joins them and makes only its
//! mount and PID namespaces ([`crate::sys::BwrapNamespaces::ahead`]).
//!
//! What this changes for the sandbox: nothing it can see. The namespaces are the same kinds,
//! made by the same code (`sys::namespace_helper_main` runs the steps outer and the hook ran),
//! owned by the same user, used by one sandbox only ([`take`] removes them), and held only by
//! descriptors of the supervisor (close-on-exec) until the sandbox's setup has joined them.
//! Only with the network off: the helper's namespace has the stub's addresses on `lo` and its
//! sockets bound, where a proxy-mode command's lookup would wait for an answer that never
//! comes. Where anything fails — the helper cannot make a namespace, dies, or does not send
//! one within [`WAIT`] — the sandbox makes its own namespaces as before and reports its own
//! failure at its own stage: never a weaker sandbox, only a slower one.

use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::Duration;

use crate::dnsstub::{self, Receiver};
use crate::sys;

/// How long a sandbox waits for a helper's namespaces before it makes its own.
const WAIT: Duration = Duration::from_secs(5);

/// A helper at work (or done), and the supervisor's end of its channel.
struct Pending {
    helper: sys::NamespaceHelper,
    receiver: Receiver,
    ids: (u32, u32),
}

/// At most one helper per process: one sandbox's worth is made ahead.
static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

/// Start making the next sandbox's namespaces, unless a helper already did or is
/// doing so. Best effort: nothing is reported; a sandbox without namespaces made ahead makes
/// its own.
pub fn prepare() {
    let Ok(mut pending) = PENDING.lock() else {
        return;
    };
    if pending.is_some() {
        return;
    }
    let addresses = dnsstub::resolver_addresses(
        &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    );
    let Ok((receiver, theirs, handoff)) = dnsstub::handoff(&addresses) else {
        return;
    };
    let ids = (sys::current_uid(), sys::current_gid());
    let plan = sys::NamespacePlan {
        uid_map: sys::id_map(ids.0),
        gid_map: sys::id_map(ids.1),
        parent_pid: sys::current_pid(),
        handoff,
    };
    if let Ok(helper) = sys::spawn_namespace_helper(plan) {
        *pending = Some(Pending {
            helper,
            receiver,
            ids,
        });
    }
    // The helper has its copy of its end.
    drop(theirs);
}

/// What a sandbox's setup uses for its user and network namespaces and its resolver stub:
/// namespaces made ahead (and the stub's sockets the helper bound in them), or, without them,
/// a new channel over which the setup hands over the sockets it binds itself.
#[derive(Default)]
pub(crate) struct Setup {
    /// The namespaces made ahead (user, net; close-on-exec): the supervisor's copies, to drop
    /// once the setup has its own.
    pub namespaces: Option<(OwnedFd, OwnedFd)>,
    /// The resolver stub's channel (the helper's, or the new one); `None` in proxy mode, or
    /// when no channel could be made (best effort: the command is as isolated, only without
    /// the network-off hint).
    pub stub: Option<Receiver>,
    /// The setup's end of the new channel and what it binds (when the setup makes the stub's
    /// sockets); drop the end once the setup has its copy.
    pub handoff: Option<(OwnedFd, sys::DnsHandoff)>,
    /// The helper, perhaps still binding the stub's sockets: reap it with
    /// [`sys::NamespaceHelper::finish`] once they are received.
    pub helper: Option<sys::NamespaceHelper>,
}

impl Setup {
    /// The namespaces' descriptors, for the setup's plan.
    pub(crate) fn namespace_fds(&self) -> Option<(std::os::fd::RawFd, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        self.namespaces
            .as_ref()
            .map(|(user, net)| (user.as_raw_fd(), net.as_raw_fd()))
    }
}

/// The [`Setup`] of a sandbox. Only with the network off are namespaces made ahead taken: the
/// helper's namespace has the stub's addresses on `lo` and its sockets bound, which in proxy
/// mode would leave a lookup waiting for an answer that never comes (there they stay pending,
/// and are discarded).
pub(crate) fn setup(network_off: bool) -> Setup {
    if !network_off {
        return Setup::default();
    }
    if let Some(a) = take() {
        return Setup {
            namespaces: Some((a.user, a.net)),
            stub: Some(a.stub),
            handoff: None,
            helper: Some(a.helper),
        };
    }
    match dnsstub::handoff(&dnsstub::resolver_addresses(
        &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    )) {
        Ok((receiver, theirs, plan)) => Setup {
            stub: Some(receiver),
            handoff: Some((theirs, plan)),
            ..Setup::default()
        },
        Err(_) => Setup::default(),
    }
}

/// Kill and reap a helper whose namespaces no sandbox took, if any (before the process ends,
/// so that nothing it started outlives it, not even as a zombie).
pub fn discard() {
    let pending = PENDING.lock().ok().and_then(|mut p| p.take());
    drop(pending);
}

/// Namespaces made ahead, for one sandbox.
struct Ahead {
    /// The user namespace (close-on-exec).
    user: OwnedFd,
    /// The network namespace, owned by `user` (close-on-exec).
    net: OwnedFd,
    /// The resolver stub's sockets, bound in `net`, in the channel (or on their way).
    stub: Receiver,
    /// The helper, perhaps still binding the stub's sockets: reap it with
    /// [`sys::NamespaceHelper::finish`] once they are received (dropped, it is killed first).
    helper: sys::NamespaceHelper,
}

/// The namespaces made ahead, if [`prepare`] started a helper and it made them (a helper
/// that made nothing is killed and reaped). Blocks until the helper has sent them, at most
/// [`WAIT`].
fn take() -> Option<Ahead> {
    let pending = PENDING.lock().ok()?.take()?;
    let user = pending.receiver.receive_fd(WAIT);
    let net = user
        .as_ref()
        .and_then(|_| pending.receiver.receive_fd(WAIT));
    // Made for the user this process runs as (a setuid change since would make them wrong).
    let same_user = pending.ids == (sys::current_uid(), sys::current_gid());
    match (user, net) {
        (Some(user), Some(net)) if same_user => Some(Ahead {
            user,
            net,
            stub: pending.receiver,
            // Not reaped yet: it may still be binding the stub's sockets, which the sandbox
            // needs only once it runs.
            helper: pending.helper,
        }),
        // Failed, too slow, or not ours: dropped, it is killed and reaped.
        _ => None,
    }
}
