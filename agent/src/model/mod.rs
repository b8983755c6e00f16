//! Model clients: the provider-neutral conversation types and, per provider, a client that
//! speaks its streaming wire format.

pub mod types;

pub use types::{
    Attempt, Block, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, Role,
    StreamEvent, TokenUsage, Tool,
};
