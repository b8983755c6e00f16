//! Staging backends for staged commands.
//!
//! Planned (see `docs/hld.md` and the staged-commands issue): with
//! `"commands": {"mode": "staged"}` a command runs over a staged view of the project — an
//! overlayfs upper layer, a reflink copy or a plain copy — and its changes become a proposal
//! that the developer applies (all or nothing, with a conflict check and a crash-safe journal)
//! or discards.
//!
//! Status: a stub. Until it is built, Garuda has no staged mode and says so; it never falls back
//! silently from staged to direct.
#![forbid(unsafe_code)]
