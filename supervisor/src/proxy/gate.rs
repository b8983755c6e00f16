//! The one decision of the proxy: may this request reach `host:port`, and at which addresses.
//!
//! [`admit`] is called for every CONNECT and for every absolute-form request, including each
//! request after the first on a keep-alive connection, and it is the only place that resolves
//! a name. Order matters and is the point of this module:
//!
//! 1. parse the host as a client would ([`TargetHost::parse`]): numeric forms become the
//!    address they mean, a malformed host is refused;
//! 2. check it against the allowlist ([`Allowlist::check`]) *before any lookup*; a name that
//!    is not listed may be put to the user (`UnknownHost::Ask`), an address never is;
//! 3. resolve an allowed name once;
//! 4. check every resolved address ([`Allowlist::check_resolved`]): one loopback, private or
//!    metadata answer that is not listed refuses the whole name;
//! 5. return exactly those addresses: the caller connects to them and resolves nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use garuda_policy::network::{Refusal, RefusalReason, TargetHost};

use super::resolve::ResolveError;
use super::scope_state::ScopeState;
use super::{AskAnswer, Shared, UnknownHost};

/// Why [`admit`] did not return addresses.
pub(crate) enum Denied {
    /// A policy refusal: `403`, and the host goes into the scope's blocked list.
    Refused(Refusal),
    /// The name was allowed but could not be resolved: `502`.
    Unresolved {
        /// The name, canonical.
        host: String,
        /// Why.
        error: ResolveError,
    },
}

/// A target the gate let through: its canonical host (what a failure to reach it names) and
/// the addresses to connect to.
pub(crate) struct Admitted {
    pub(crate) host: String,
    pub(crate) addresses: Vec<SocketAddr>,
}

/// The addresses to connect to for `host` (the host part of an authority, as received) on
/// `port`, or why not. See the module docs for the order of the checks.
pub(crate) async fn admit(
    shared: &Arc<Shared>,
    scope: &Arc<ScopeState>,
    host: &str,
    port: u16,
) -> Result<Admitted, Denied> {
    let target = TargetHost::parse(host).map_err(|e| {
        Denied::Refused(Refusal {
            host: e.host,
            port,
            reason: RefusalReason::MalformedHost(e.problem),
        })
    })?;
    if let Err(refusal) = shared.config.allowlist.check(&target, port) {
        let askable = matches!(target, TargetHost::Name(_))
            && matches!(
                refusal.reason,
                RefusalReason::NotInAllowlist | RefusalReason::PortNotAllowed
            );
        if !askable {
            return Err(Denied::Refused(refusal));
        }
        if let Err(reason) = allowed_by_user(shared, scope, &target, port, refusal.reason).await {
            return Err(Denied::Refused(Refusal { reason, ..refusal }));
        }
    }
    let addresses: Vec<IpAddr> = match &target {
        TargetHost::Ip(address) => vec![*address],
        TargetHost::Name(name) => shared
            .config
            .resolver
            .resolve(name, shared.config.limits.dns_timeout)
            .await
            .map_err(|error| Denied::Unresolved {
                host: name.to_string(),
                error,
            })?,
    };
    for address in &addresses {
        shared
            .config
            .allowlist
            .check_resolved(&target, *address, port)
            .map_err(Denied::Refused)?;
    }
    Ok(Admitted {
        host: target.to_string(),
        addresses: addresses
            .into_iter()
            .map(|a| SocketAddr::new(plain(a), port))
            .collect(),
    })
}

/// An IPv4-mapped IPv6 address as the IPv4 address it reaches (what was checked).
fn plain(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

/// A name the allowlist does not cover: allowed for this session already, or by the user now.
/// `Err` carries the reason to report: the allowlist's own (non-interactive) or
/// [`RefusalReason::DeniedByUser`].
async fn allowed_by_user(
    shared: &Arc<Shared>,
    scope: &Arc<ScopeState>,
    target: &TargetHost,
    port: u16,
    unlisted: RefusalReason,
) -> Result<(), RefusalReason> {
    let UnknownHost::Ask(ask) = &shared.config.unknown_host else {
        return Err(unlisted);
    };
    let key = (target.to_string(), port);
    let decided = || {
        if shared.session_allowed(&key) {
            Some(Ok(()))
        } else if scope.user_denied(&key) {
            // Asked once in this command: a retry loop must not flood the user.
            Some(Err(RefusalReason::DeniedByUser))
        } else {
            None
        }
    };
    if let Some(known) = decided() {
        return known;
    }
    // One question at a time; the answer to an earlier one may settle this one.
    let turn = Arc::clone(&shared.ask_turn).lock_owned().await;
    if let Some(known) = decided() {
        return known;
    }
    let ask = Arc::clone(ask);
    let (host, port_asked) = key.clone();
    // The callback blocks on the user: keep it off the runtime's workers. It holds the turn
    // itself, so a request that is abandoned meanwhile (its scope closed) cannot let a second
    // question start while the first is still on screen. A callback that panics denies.
    let answer = tokio::task::spawn_blocking(move || {
        let answer = ask.ask(&host, port_asked);
        drop(turn);
        answer
    })
    .await
    .unwrap_or(AskAnswer::Deny);
    match answer {
        AskAnswer::AllowOnce => Ok(()),
        AskAnswer::AllowSession => {
            shared.allow_for_session(key);
            Ok(())
        }
        AskAnswer::Deny => {
            scope.deny(key);
            Err(RefusalReason::DeniedByUser)
        }
    }
}
