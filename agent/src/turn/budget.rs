//! One token budget for a session's whole agent tree (seed T9).
//!
//! The parent and every child it starts share one [`Budget`]. Before each model attempt
//! (retries, compaction's summary and a child's calls included) the caller reserves the most
//! that attempt can cost; the attempt is sent only if the reservation fits. When the provider
//! reports what the attempt used, [`Budget::settle`] charges that instead and the rest
//! returns. A reservation that is never settled (the attempt failed, timed out or was
//! cancelled with no reported usage) stays spent: the provider may have charged for it, and
//! releasing it would let the tree spend past the cap.
//!
//! A child gets min(its own limit, what is left beyond the parent's floor), and none of its
//! reservations may reach into that floor: the floor is the bound of the parent's next
//! request, so the parent can always still send it and give its final answer.
//!
//! The agent is single-threaded (one current-thread runtime), so the shared state is an
//! `Rc<RefCell<..>>` and a reservation is checked and taken in one borrow: two concurrent
//! children can never both take the same tokens.

use std::cell::RefCell;
use std::rc::Rc;

use crate::model::{Message, ModelRequest, TokenUsage};

/// About four characters per token, the rule the estimate uses everywhere (seed T9).
pub const CHARS_PER_TOKEN: u64 = 4;

/// The session's pool: its cap, what is spent (settled charges and open reservations), and
/// the parent's floor.
#[derive(Debug)]
struct Pool {
    cap: u64,
    spent: u64,
    floor: u64,
}

/// A child's own account inside the pool.
#[derive(Debug)]
struct Account {
    limit: u64,
    spent: u64,
}

/// A handle on the session's budget: the parent's, or a child's (which also counts against
/// its own limit and may not reach into the parent's floor). Cloning shares it.
#[derive(Debug, Clone)]
pub struct Budget {
    pool: Rc<RefCell<Pool>>,
    /// Empty for the parent; a child's account, then its child's, and so on.
    accounts: Vec<Rc<RefCell<Account>>>,
}

/// Tokens taken from the budget for one attempt. Settle it with [`Budget::settle`] when the
/// provider reported the attempt's usage; dropping it unsettled keeps it spent.
#[derive(Debug)]
#[must_use = "an unsettled reservation stays spent"]
pub struct Reservation {
    tokens: u64,
    pool: Rc<RefCell<Pool>>,
    accounts: Vec<Rc<RefCell<Account>>>,
}

impl Reservation {
    /// Tokens reserved.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
}

/// A reservation that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the token budget cannot cover this request: it may need {needed} tokens and {left} are left"
)]
pub struct Refused {
    /// Tokens asked for.
    pub needed: u64,
    /// Tokens this handle could still reserve.
    pub left: u64,
}

impl Budget {
    /// A session's budget of `cap` tokens, nothing spent.
    pub fn new(cap: u64) -> Budget {
        Budget::with_spent(cap, 0)
    }

    /// A session's budget of `cap` tokens of which `spent` are already spent (a resumed
    /// session: the charges its journal recorded).
    pub fn with_spent(cap: u64, spent: u64) -> Budget {
        Budget {
            pool: Rc::new(RefCell::new(Pool {
                cap,
                spent,
                floor: 0,
            })),
            accounts: Vec::new(),
        }
    }

    /// A child's handle: its limit is min(`limit`, what this handle can still reserve), it
    /// shares the pool, and it cannot reserve into the parent's floor.
    pub fn child(&self, limit: u64) -> Budget {
        let left = self.left_for_children();
        let mut accounts = self.accounts.clone();
        accounts.push(Rc::new(RefCell::new(Account {
            limit: limit.min(left),
            spent: 0,
        })));
        Budget {
            pool: Rc::clone(&self.pool),
            accounts,
        }
    }

    /// Sets the parent's floor: the bound of its next request, which no child may reserve
    /// into. 0 removes it.
    pub fn set_floor(&self, tokens: u64) {
        self.pool.borrow_mut().floor = tokens;
    }

    /// Takes `tokens` for one attempt, or refuses when they do not fit: in the pool (a child
    /// also leaving the floor untouched) and in every account on the way.
    pub fn reserve(&self, tokens: u64) -> Result<Reservation, Refused> {
        let left = self.left();
        if tokens > left {
            return Err(Refused {
                needed: tokens,
                left,
            });
        }
        self.pool.borrow_mut().spent += tokens;
        for a in &self.accounts {
            a.borrow_mut().spent += tokens;
        }
        Ok(Reservation {
            tokens,
            pool: Rc::clone(&self.pool),
            accounts: self.accounts.clone(),
        })
    }

    /// Replaces a reservation by what the provider reported: the unused part returns (and a
    /// usage above the reservation is charged in full: the estimate is approximate).
    pub fn settle(&self, reservation: Reservation, usage: TokenUsage) {
        let used = usage.input_tokens.saturating_add(usage.output_tokens);
        let Reservation {
            tokens,
            pool,
            accounts,
        } = reservation;
        let mut p = pool.borrow_mut();
        p.spent = p.spent.saturating_sub(tokens).saturating_add(used);
        for a in &accounts {
            let mut a = a.borrow_mut();
            a.spent = a.spent.saturating_sub(tokens).saturating_add(used);
        }
    }

    /// Tokens this handle can still reserve.
    pub fn left(&self) -> u64 {
        let p = self.pool.borrow();
        let mut left = if self.accounts.is_empty() {
            // The parent may use its own floor: that is what the floor is kept for.
            p.cap.saturating_sub(p.spent)
        } else {
            p.cap.saturating_sub(p.spent).saturating_sub(p.floor)
        };
        for a in &self.accounts {
            let a = a.borrow();
            left = left.min(a.limit.saturating_sub(a.spent));
        }
        left
    }

    /// What a child of this handle could get: like [`Budget::left`] but never into the floor.
    fn left_for_children(&self) -> u64 {
        let p = self.pool.borrow();
        let mut left = p.cap.saturating_sub(p.spent).saturating_sub(p.floor);
        for a in &self.accounts {
            let a = a.borrow();
            left = left.min(a.limit.saturating_sub(a.spent));
        }
        left
    }

    /// Tokens spent in the whole session (settled charges and open reservations).
    pub fn spent(&self) -> u64 {
        self.pool.borrow().spent
    }

    /// The session's cap.
    pub fn cap(&self) -> u64 {
        self.pool.borrow().cap
    }

    /// Tokens this child handle has spent (0 for the parent's handle).
    pub fn own_spent(&self) -> u64 {
        self.accounts.last().map_or(0, |a| a.borrow().spent)
    }
}

/// Characters as tokens, rounded up.
pub fn tokens_of_chars(chars: u64) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN)
}

/// Characters of a message as it is sent (its JSON form: quoting and escapes count).
pub fn message_chars(message: &Message) -> u64 {
    serde_json::to_string(message).map_or(0, |s| s.len() as u64)
}

/// The input side of a request in tokens: system prompt, messages and tool definitions at
/// about four characters a token.
pub fn request_input_tokens(request: &ModelRequest) -> u64 {
    let mut chars = request.system.len() as u64;
    chars += request.messages.iter().map(message_chars).sum::<u64>();
    chars += request
        .tools
        .iter()
        .map(|t| serde_json::to_string(t).map_or(0, |s| s.len() as u64))
        .sum::<u64>();
    tokens_of_chars(chars)
}

/// What the provider last measured: the context (input and output tokens of a response)
/// covering the first `messages` messages of the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// Tokens the provider counted.
    pub tokens: u64,
    /// Messages those tokens cover (the response included).
    pub messages: usize,
}

/// The input estimate of seed T9: the larger of the whole request by characters and the last
/// measured context plus the messages added since.
pub fn input_estimate(request: &ModelRequest, measured: Option<Measured>) -> u64 {
    let by_chars = request_input_tokens(request);
    let by_measure = measured.map_or(0, |m| {
        let new: u64 = request
            .messages
            .iter()
            .skip(m.messages)
            .map(message_chars)
            .sum();
        m.tokens.saturating_add(tokens_of_chars(new))
    });
    by_chars.max(by_measure)
}

/// What one attempt of `request` reserves: its input estimate plus its `max_tokens`.
pub fn reservation_for(request: &ModelRequest, measured: Option<Measured>) -> u64 {
    input_estimate(request, measured).saturating_add(u64::from(request.max_tokens))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn used(input: u64, output: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            output_tokens: output,
        }
    }

    /// A child that runs `calls` attempts of `per_call` tokens each, each reporting `used`
    /// of them, or stops at the first refusal. Returns what it got charged.
    fn run_child(budget: &Budget, calls: u32, per_call: u64, used_tokens: u64) -> u64 {
        let mut charged = 0;
        for _ in 0..calls {
            match budget.reserve(per_call) {
                Ok(r) => {
                    budget.settle(r, used(used_tokens, 0));
                    charged += used_tokens;
                }
                Err(_) => break,
            }
        }
        charged
    }

    #[test]
    fn three_children_stay_inside_a_small_parent_budget() {
        // The parent has 10,000 tokens; each child's own limit is 8,000 and it would spend
        // all of it (8 calls of 1,000, each fully used).
        let parent = Budget::new(10_000);
        let children: Vec<Budget> = (0..3).map(|_| parent.child(8_000)).collect();
        // Interleaved, as parallel children are: one reservation at a time each.
        let mut charged = [0u64; 3];
        for _ in 0..8 {
            for (i, c) in children.iter().enumerate() {
                charged[i] += run_child(c, 1, 1_000, 1_000);
            }
        }
        let total: u64 = charged.iter().sum();
        assert!(total <= 10_000, "children spent {total} of a 10,000 budget");
        assert_eq!(parent.spent(), total);
        assert_eq!(total, 10_000, "the children may use what is there");

        // Negative control: the old design (each child with its own budget of its own limit,
        // whatever the parent has left) spends past the parent's cap.
        let separate: Vec<Budget> = (0..3).map(|_| Budget::new(8_000)).collect();
        let total: u64 = separate.iter().map(|b| run_child(b, 8, 1_000, 1_000)).sum();
        assert_eq!(total, 24_000);
        assert!(total > 10_000);
    }

    #[test]
    fn a_child_gets_no_more_than_what_is_left() {
        let parent = Budget::new(10_000);
        let r = parent.reserve(7_000).unwrap();
        parent.settle(r, used(6_000, 1_000));
        let child = parent.child(8_000);
        assert_eq!(child.left(), 3_000);
        assert_eq!(
            child.reserve(3_001).unwrap_err(),
            Refused {
                needed: 3_001,
                left: 3_000
            }
        );
        // Control: its own limit is the bound when it is the smaller.
        assert_eq!(parent.child(500).left(), 500);
    }

    #[test]
    fn unused_child_tokens_return_to_the_parent() {
        let parent = Budget::new(10_000);
        let child = parent.child(8_000);
        let r = child.reserve(5_000).unwrap();
        assert_eq!(parent.left(), 5_000, "the open reservation counts");
        child.settle(r, used(300, 200));
        // The child stops early: only what it used is gone.
        assert_eq!(parent.spent(), 500);
        assert_eq!(parent.left(), 9_500);
        drop(child);
        assert_eq!(parent.left(), 9_500);
    }

    #[test]
    fn the_parent_still_gets_its_final_answer() {
        let parent = Budget::new(10_000);
        // The bound of the parent's next request.
        parent.set_floor(3_000);
        let children: Vec<Budget> = (0..3).map(|_| parent.child(100_000)).collect();
        for _ in 0..10 {
            for c in &children {
                run_child(c, 1, 1_000, 1_000);
            }
        }
        assert_eq!(parent.spent(), 7_000, "the children used all but the floor");
        assert!(children[0].reserve(1).is_err());
        parent.set_floor(0);
        // The final answer fits.
        let r = parent.reserve(3_000).unwrap();
        parent.settle(r, used(2_000, 500));
        assert_eq!(parent.spent(), 9_500);

        // Negative control: with no floor the children take it all and the answer is refused.
        let parent = Budget::new(10_000);
        let children: Vec<Budget> = (0..3).map(|_| parent.child(100_000)).collect();
        for _ in 0..10 {
            for c in &children {
                run_child(c, 1, 1_000, 1_000);
            }
        }
        assert_eq!(
            parent.reserve(3_000).unwrap_err(),
            Refused {
                needed: 3_000,
                left: 0
            }
        );
    }

    #[test]
    fn a_failure_without_usage_keeps_its_reservation_and_one_with_usage_settles() {
        let budget = Budget::new(10_000);
        // Failed, no usage reported: the reservation is dropped unsettled.
        let r = budget.reserve(4_000).unwrap();
        drop(r);
        assert_eq!(budget.spent(), 4_000);
        // Failed (a cut-off stream) with a reported usage: settles to it.
        let r = budget.reserve(4_000).unwrap();
        budget.settle(r, used(1_000, 50));
        assert_eq!(budget.spent(), 5_050);
        // A usage above the reservation is charged in full.
        let r = budget.reserve(100).unwrap();
        budget.settle(r, used(150, 0));
        assert_eq!(budget.spent(), 5_200);
    }

    #[test]
    fn a_cancelled_child_keeps_its_open_reservation() {
        let parent = Budget::new(10_000);
        let child = parent.child(8_000);
        let open = child.reserve(2_500).unwrap();
        // The child is cancelled: its future, and the reservation it held, are dropped.
        drop(open);
        drop(child);
        assert_eq!(parent.spent(), 2_500);
        assert_eq!(parent.left(), 7_500);
    }

    #[test]
    fn the_estimate_takes_the_larger_of_characters_and_the_measure() {
        use crate::model::{Block, Role};
        let msg = |t: &str| Message {
            role: Role::User,
            content: vec![Block::Text { text: t.into() }],
        };
        let request = ModelRequest {
            system: "s".repeat(400),
            messages: vec![msg(&"a".repeat(400)), msg(&"b".repeat(40))],
            tools: vec![],
            max_tokens: 1_000,
        };
        let by_chars = request_input_tokens(&request);
        assert!((200..260).contains(&by_chars), "{by_chars}");
        assert_eq!(input_estimate(&request, None), by_chars);
        // A measure larger than the characters wins, plus the messages added since.
        let measured = Measured {
            tokens: 5_000,
            messages: 1,
        };
        let second = tokens_of_chars(message_chars(&request.messages[1]));
        assert_eq!(input_estimate(&request, Some(measured)), 5_000 + second);
        assert_eq!(
            reservation_for(&request, Some(measured)),
            5_000 + second + 1_000
        );
        // A smaller measure does not lower it.
        let small = Measured {
            tokens: 1,
            messages: 2,
        };
        assert_eq!(input_estimate(&request, Some(small)), by_chars);
    }
}
