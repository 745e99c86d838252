//! What one output-bearing event produced, beyond its kind: which channels its output went to (answer,
//! reasoning, a tool call), which choices it advanced, and, only when a tokenizer will count the output,
//! its text, kept apart by choice and channel.

/// The output text of each choice so far, for a tokenizer to count: entry `2i` is choice `i`'s answer
/// text and entry `2i + 1` its reasoning (choice 0 for APIs with one answer), so at most twice
/// [`MAX_CHOICE`] plus 2 entries. The choices are kept apart because their events interleave: tokenized
/// as one text, one choice's words would run into another's; reasoning is kept apart so its tokens can
/// be told.
pub type ChoiceTexts = Vec<String>;

/// Whether entry `at` of [`ChoiceTexts`] is reasoning.
pub fn is_reasoning_text(at: usize) -> bool {
    at % 2 == 1
}

/// What one event produced, beyond its kind: the generated text, for a tokenizer to count, and the
/// choices it advanced. Without a tokenizer it holds no text buffer and [`EventOutput::push`] does
/// nothing, so no text is ever copied. The choice list is the caller's, cleared before each event and
/// reused, so marking a choice allocates nothing once a stream is under way.
pub struct EventOutput<'a> {
    text: Option<&'a mut ChoiceTexts>,
    choices: &'a mut Vec<u32>,
    /// The choice the next text belongs to: the one marked last (0 until one is).
    current: u32,
    /// The event carried reasoning (thinking) output.
    reasoning: bool,
    /// The event carried answer output (text, refusal, tool call).
    answer: bool,
    /// The event was part of a tool call (see [`EventOutput::tool_call`]).
    tool_call: bool,
}

/// Whether an output-bearing event's output was reasoning, answer or both, and whether the event was
/// part of a tool call (which may be so of an event that is not a token: a tool-use block's start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Channels {
    pub reasoning: bool,
    pub answer: bool,
    pub tool_call: bool,
}

/// Choices beyond this index share the last slot: a client's `n` must not grow per-stream state.
pub const MAX_CHOICE: u32 = 63;

impl<'a> EventOutput<'a> {
    pub fn new(text: Option<&'a mut ChoiceTexts>, choices: &'a mut Vec<u32>) -> Self {
        EventOutput {
            text,
            choices,
            current: 0,
            reasoning: false,
            answer: false,
            tool_call: false,
        }
    }

    /// The event carried reasoning output (OpenAI `reasoning_content`/`reasoning`, Responses reasoning
    /// deltas, Anthropic `thinking_delta`, Ollama `thinking`).
    pub fn reasoning(&mut self) {
        self.reasoning = true;
    }

    /// The event carried answer output: anything that is not reasoning. An output event a dialect
    /// marks as neither is answer (APIs without a reasoning channel).
    pub fn answer(&mut self) {
        self.answer = true;
    }

    /// The event starts or continues a tool call: OpenAI chat's `tool_calls`/`function_call` deltas,
    /// Responses' function-call and custom-tool items and their argument deltas, Anthropic's `tool_use`
    /// blocks and their `input_json_delta`, Ollama's `tool_calls`. The first such event is when an agent
    /// learns it has something to do (`t_tool`). A block's or item's start names the tool without being
    /// a token, so it may mark a tool call on an event that is not output.
    pub fn tool_call(&mut self) {
        self.tool_call = true;
    }

    /// Whether a tokenizer wants the text: without one, [`EventOutput::push`] does nothing, so a
    /// dialect need not decode the text it would push.
    pub fn wants_text(&self) -> bool {
        self.text.is_some()
    }

    /// What the event's output was: answer unless it was marked reasoning only.
    pub fn channels(&self) -> Channels {
        Channels {
            reasoning: self.reasoning,
            answer: self.answer || !self.reasoning,
            tool_call: self.tool_call,
        }
    }

    /// Appends generated answer text (content, refusal or tool-call arguments) to the text of the
    /// choice marked last.
    pub fn push(&mut self, text: &str) {
        self.push_at(2 * self.current as usize, text);
    }

    /// Appends reasoning text to the choice marked last, and marks the event as reasoning.
    pub fn push_reasoning(&mut self, text: &str) {
        self.reasoning = true;
        self.push_at(2 * self.current as usize + 1, text);
    }

    fn push_at(&mut self, at: usize, text: &str) {
        if let Some(texts) = self.text.as_mut() {
            if texts.len() <= at {
                texts.resize_with(at + 1, String::new);
            }
            if let Some(choice) = texts.get_mut(at) {
                choice.push_str(text);
            }
        }
    }

    /// The event carried output for choice `index` (APIs with one answer per response never call it:
    /// their output is choice 0). Marked once per choice and event, whatever the event repeats; the
    /// text pushed next is that choice's.
    pub fn choice(&mut self, index: u32) {
        let index = index.min(MAX_CHOICE);
        self.current = index;
        if !self.choices.contains(&index) {
            self.choices.push(index);
        }
    }
}
