//! Which agent frame each state of the conversation allows: the table, as data.
//!
//! OpenSSH's monitor keeps a table of the requests its unprivileged child may make in each
//! phase, and anything else ends the child. This is Garuda's: a frame the table does not
//! allow in the current state is a protocol violation (the agent is killed and the violation
//! audited); an allowed one is handled. `docs/ipc.md` prints the same table; a unit test
//! checks every (state, frame) pair against it.

use garuda_ipc::{AgentFrame, Request};

/// Where the conversation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The agent was started; only `hello` may come.
    AwaitHello,
    /// `start` was sent, or a turn ended; the supervisor may send a prompt.
    Idle,
    /// A prompt was sent; the agent works.
    InTurn,
    /// `cancel` was sent; the agent winds the turn down.
    Cancelling,
    /// Nothing more is read.
    Closed,
}

/// The kinds of frame the agent can send, as the table names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `hello`.
    Hello,
    /// A tool request other than `journal_append`.
    Tool,
    /// `journal_append`.
    Journal,
    /// `ui`.
    Ui,
    /// `turn_end`.
    TurnEnd,
}

impl Kind {
    /// The kind of `frame`.
    pub fn of(frame: &AgentFrame) -> Kind {
        match frame {
            AgentFrame::Hello { .. } => Kind::Hello,
            AgentFrame::Request {
                request: Request::JournalAppend { .. },
                ..
            } => Kind::Journal,
            AgentFrame::Request { .. } => Kind::Tool,
            AgentFrame::Ui { .. } => Kind::Ui,
            AgentFrame::TurnEnd { .. } => Kind::TurnEnd,
        }
    }
}

/// What the table says of a frame in a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Handle it.
    Allow,
    /// Answer it with a refusal without doing anything: a tool request that left the agent
    /// before it saw `cancel` is not the agent's fault.
    RefuseCancelled,
    /// A protocol violation: kill the agent. The text says why, for the audit line.
    Violation(&'static str),
}

/// The table: every state, every kind, one rule and the reason for it.
const TABLE: &[(State, Kind, Rule)] = &[
    (State::AwaitHello, Kind::Hello, Rule::Allow),
    (
        State::AwaitHello,
        Kind::Tool,
        Rule::Violation("a request before hello"),
    ),
    (
        State::AwaitHello,
        Kind::Journal,
        Rule::Violation("a request before hello"),
    ),
    (
        State::AwaitHello,
        Kind::Ui,
        Rule::Violation("a ui event before hello"),
    ),
    (
        State::AwaitHello,
        Kind::TurnEnd,
        Rule::Violation("turn_end before hello"),
    ),
    (State::Idle, Kind::Hello, Rule::Violation("a second hello")),
    (
        State::Idle,
        Kind::Tool,
        Rule::Violation("a tool request outside a turn"),
    ),
    // The journal is open whenever the conversation is, between turns too.
    (State::Idle, Kind::Journal, Rule::Allow),
    (
        State::Idle,
        Kind::Ui,
        Rule::Violation("a ui event outside a turn"),
    ),
    (
        State::Idle,
        Kind::TurnEnd,
        Rule::Violation("turn_end outside a turn"),
    ),
    (
        State::InTurn,
        Kind::Hello,
        Rule::Violation("a second hello"),
    ),
    (State::InTurn, Kind::Tool, Rule::Allow),
    (State::InTurn, Kind::Journal, Rule::Allow),
    (State::InTurn, Kind::Ui, Rule::Allow),
    (State::InTurn, Kind::TurnEnd, Rule::Allow),
    (
        State::Cancelling,
        Kind::Hello,
        Rule::Violation("a second hello"),
    ),
    (State::Cancelling, Kind::Tool, Rule::RefuseCancelled),
    (State::Cancelling, Kind::Journal, Rule::Allow),
    (State::Cancelling, Kind::Ui, Rule::Allow),
    (State::Cancelling, Kind::TurnEnd, Rule::Allow),
];

/// The rule for `kind` in `state`. `Closed`, and a pair missing from the table, are
/// violations: the table fails closed.
pub fn rule(state: State, kind: Kind) -> Rule {
    TABLE
        .iter()
        .find(|(s, k, _)| *s == state && *k == kind)
        .map(|(_, _, r)| *r)
        .unwrap_or(Rule::Violation("the conversation is closed"))
}

/// The state after an allowed frame of `kind` in `state`.
pub fn after_agent(state: State, kind: Kind) -> State {
    match (state, kind) {
        (State::AwaitHello, Kind::Hello) => State::Idle,
        (State::InTurn | State::Cancelling, Kind::TurnEnd) => State::Idle,
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const STATES: [State; 5] = [
        State::AwaitHello,
        State::Idle,
        State::InTurn,
        State::Cancelling,
        State::Closed,
    ];
    const KINDS: [Kind; 5] = [
        Kind::Hello,
        Kind::Tool,
        Kind::Journal,
        Kind::Ui,
        Kind::TurnEnd,
    ];

    #[test]
    fn every_open_state_has_one_rule_per_kind() {
        for s in STATES.iter().filter(|s| **s != State::Closed) {
            for k in KINDS {
                let n = TABLE
                    .iter()
                    .filter(|(ts, tk, _)| ts == s && *tk == k)
                    .count();
                assert_eq!(n, 1, "{s:?} {k:?}");
            }
        }
        assert!(TABLE.iter().all(|(s, _, _)| *s != State::Closed));
    }

    #[test]
    fn the_table_says_what_docs_ipc_md_says() {
        use Rule::*;
        let allowed = |s, k| rule(s, k) == Allow;
        // Only hello opens the conversation, and only once.
        assert!(allowed(State::AwaitHello, Kind::Hello));
        for k in [Kind::Tool, Kind::Journal, Kind::Ui, Kind::TurnEnd] {
            assert!(matches!(rule(State::AwaitHello, k), Violation(_)), "{k:?}");
        }
        for s in [State::Idle, State::InTurn, State::Cancelling] {
            assert!(matches!(rule(s, Kind::Hello), Violation(_)), "{s:?}");
        }
        // Tools only in a turn; a cancelled turn's late requests are refused, not fatal.
        assert!(matches!(rule(State::Idle, Kind::Tool), Violation(_)));
        assert!(allowed(State::InTurn, Kind::Tool));
        assert_eq!(rule(State::Cancelling, Kind::Tool), RefuseCancelled);
        // The journal is open whenever the conversation is.
        for s in [State::Idle, State::InTurn, State::Cancelling] {
            assert!(allowed(s, Kind::Journal), "{s:?}");
        }
        // Nothing after close.
        for k in KINDS {
            assert!(matches!(rule(State::Closed, k), Violation(_)), "{k:?}");
        }
        assert_eq!(after_agent(State::AwaitHello, Kind::Hello), State::Idle);
        assert_eq!(after_agent(State::Cancelling, Kind::TurnEnd), State::Idle);
        assert_eq!(after_agent(State::InTurn, Kind::Tool), State::InTurn);
    }
}
