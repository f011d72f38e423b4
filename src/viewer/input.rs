//! What a viewer sends, read strictly: each message is one of a few shapes, turned here into
//! the one CDP command it stands for (never forwarded as sent). Pure, so every rule is
//! unit-tested.

use serde_json::{Value, json};

/// Longest text one `text` message may insert.
pub const MAX_TEXT_CHARS: usize = 4096;

/// Largest coordinate or wheel delta accepted (CSS pixels).
const MAX_COORD: f64 = 1.0e6;

/// A CDP command for the watched page, built from a viewer's message.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// E.g. `Input.dispatchMouseEvent`.
    pub method: &'static str,
    /// Its params, built here.
    pub params: Value,
}

/// One message from a viewer.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMsg {
    /// Input for the watched page (dropped unless the viewer may control it).
    Input(Command),
    /// Watch another page (a tab).
    Select(String),
    /// The person at the viewer is done: the pending handoff (the one named, if any) ends.
    Done(Option<String>),
    /// Answered `pong` once every earlier message of this viewer has been handled.
    Ping,
}

/// Why a message was refused (the viewer's fault; the connection stays open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Not JSON, or not an object with a known `type`.
    #[error("unknown message")]
    Unknown,
    /// A field missing, of the wrong type or out of range.
    #[error("invalid field {0}")]
    Field(&'static str),
}

/// Reads one text message from a viewer.
pub fn parse(text: &str) -> Result<ClientMsg, InputError> {
    let v: Value = serde_json::from_str(text).map_err(|_| InputError::Unknown)?;
    match v["type"].as_str() {
        Some("mouse") => mouse(&v).map(ClientMsg::Input),
        Some("wheel") => wheel(&v).map(ClientMsg::Input),
        Some("key") => key(&v).map(ClientMsg::Input),
        Some("text") => text_input(&v).map(ClientMsg::Input),
        Some("select") => {
            let id = v["page"].as_str().ok_or(InputError::Field("page"))?;
            if !crate::upstream::is_target_id(id) {
                return Err(InputError::Field("page"));
            }
            Ok(ClientMsg::Select(id.to_owned()))
        }
        Some("done") => match &v["handoff"] {
            Value::Null => Ok(ClientMsg::Done(None)),
            h => h
                .as_str()
                .filter(|h| h.len() <= 64)
                .map(|h| ClientMsg::Done(Some(h.to_owned())))
                .ok_or(InputError::Field("handoff")),
        },
        Some("ping") => Ok(ClientMsg::Ping),
        _ => Err(InputError::Unknown),
    }
}

fn coord(v: &Value, name: &'static str) -> Result<f64, InputError> {
    v[name]
        .as_f64()
        .filter(|x| x.is_finite() && x.abs() <= MAX_COORD)
        .ok_or(InputError::Field(name))
}

fn modifiers(v: &Value) -> Result<u64, InputError> {
    match &v["modifiers"] {
        Value::Null => Ok(0),
        m => m
            .as_u64()
            .filter(|m| *m <= 15)
            .ok_or(InputError::Field("modifiers")),
    }
}

fn one_of(
    v: &Value,
    name: &'static str,
    allowed: &[&'static str],
) -> Result<&'static str, InputError> {
    let s = v[name].as_str().ok_or(InputError::Field(name))?;
    allowed
        .iter()
        .find(|a| **a == s)
        .copied()
        .ok_or(InputError::Field(name))
}

fn mouse(v: &Value) -> Result<Command, InputError> {
    let kind = one_of(v, "event", &["mousePressed", "mouseReleased", "mouseMoved"])?;
    let button = match &v["button"] {
        Value::Null => "none",
        _ => one_of(v, "button", &["none", "left", "middle", "right"])?,
    };
    let clicks = match &v["clickCount"] {
        Value::Null => 0,
        c => c
            .as_u64()
            .filter(|c| *c <= 3)
            .ok_or(InputError::Field("clickCount"))?,
    };
    Ok(Command {
        method: "Input.dispatchMouseEvent",
        params: json!({
            "type": kind, "x": coord(v, "x")?, "y": coord(v, "y")?, "button": button,
            "clickCount": clicks, "modifiers": modifiers(v)?,
        }),
    })
}

fn wheel(v: &Value) -> Result<Command, InputError> {
    Ok(Command {
        method: "Input.dispatchMouseEvent",
        params: json!({
            "type": "mouseWheel", "x": coord(v, "x")?, "y": coord(v, "y")?,
            "deltaX": coord(v, "deltaX")?, "deltaY": coord(v, "deltaY")?,
            "modifiers": modifiers(v)?,
        }),
    })
}

/// A short printable-free name (`Enter`, `ArrowLeft`, `a`…), as `KeyboardEvent.key`/`code` are.
fn key_name(v: &Value, name: &'static str) -> Result<String, InputError> {
    let s = v[name].as_str().ok_or(InputError::Field(name))?;
    if s.is_empty() || s.chars().count() > 32 || s.chars().any(char::is_control) {
        return Err(InputError::Field(name));
    }
    Ok(s.to_owned())
}

fn key(v: &Value) -> Result<Command, InputError> {
    let kind = one_of(v, "event", &["keyDown", "keyUp", "rawKeyDown"])?;
    let key = key_name(v, "key")?;
    let code = match &v["code"] {
        Value::Null => String::new(),
        _ => key_name(v, "code")?,
    };
    let key_code = match &v["keyCode"] {
        Value::Null => 0,
        c => c
            .as_u64()
            .filter(|c| *c <= 255)
            .ok_or(InputError::Field("keyCode"))?,
    };
    let mut params = json!({
        "type": kind, "key": key, "code": code, "windowsVirtualKeyCode": key_code,
        "modifiers": modifiers(v)?,
    });
    // Enter makes a newline or submits a form only with its text.
    if kind == "keyDown" && key == "Enter" {
        params["text"] = json!("\r");
    }
    Ok(Command {
        method: "Input.dispatchKeyEvent",
        params,
    })
}

fn text_input(v: &Value) -> Result<Command, InputError> {
    let text = v["text"].as_str().ok_or(InputError::Field("text"))?;
    if text.is_empty() || text.chars().count() > MAX_TEXT_CHARS {
        return Err(InputError::Field("text"));
    }
    Ok(Command {
        method: "Input.insertText",
        params: json!({ "text": text }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_becomes_the_one_command_it_stands_for() {
        let m = parse(r#"{"type":"mouse","event":"mousePressed","x":10,"y":20.5,"button":"left","clickCount":1,"extra":"dropped"}"#).unwrap();
        assert_eq!(
            m,
            ClientMsg::Input(Command {
                method: "Input.dispatchMouseEvent",
                params: json!({"type":"mousePressed","x":10.0,"y":20.5,"button":"left","clickCount":1,"modifiers":0}),
            })
        );
        let w = parse(r#"{"type":"wheel","x":1,"y":2,"deltaX":0,"deltaY":120}"#).unwrap();
        let ClientMsg::Input(c) = w else { panic!() };
        assert_eq!(c.params["type"], "mouseWheel");
        assert_eq!(c.params["deltaY"], 120.0);
        let k =
            parse(r#"{"type":"key","event":"keyDown","key":"Enter","code":"Enter","keyCode":13}"#)
                .unwrap();
        let ClientMsg::Input(c) = k else { panic!() };
        assert_eq!(c.method, "Input.dispatchKeyEvent");
        assert_eq!(c.params["text"], "\r");
        assert_eq!(
            parse(r#"{"type":"text","text":"héllo"}"#).unwrap(),
            ClientMsg::Input(Command {
                method: "Input.insertText",
                params: json!({"text":"héllo"})
            })
        );
        assert_eq!(
            parse(r#"{"type":"select","page":"ABC-1"}"#).unwrap(),
            ClientMsg::Select("ABC-1".into())
        );
        assert_eq!(parse(r#"{"type":"done"}"#).unwrap(), ClientMsg::Done(None));
        assert_eq!(
            parse(r#"{"type":"done","handoff":"ho_1"}"#).unwrap(),
            ClientMsg::Done(Some("ho_1".into()))
        );
        assert_eq!(
            parse(r#"{"type":"done","handoff":5}"#),
            Err(InputError::Field("handoff"))
        );
    }

    #[test]
    fn hostile_messages_are_refused() {
        let long = format!(
            r#"{{"type":"text","text":"{}"}}"#,
            "a".repeat(MAX_TEXT_CHARS + 1)
        );
        let cases: [(&str, InputError); 10] = [
            ("not json", InputError::Unknown),
            (
                r#"{"method":"Runtime.evaluate","params":{}}"#,
                InputError::Unknown,
            ),
            (
                r#"{"type":"mouse","event":"mouseWheel","x":1,"y":1}"#,
                InputError::Field("event"),
            ),
            (
                r#"{"type":"mouse","event":"mouseMoved","x":"1","y":1}"#,
                InputError::Field("x"),
            ),
            (
                r#"{"type":"mouse","event":"mouseMoved","x":1e300,"y":1}"#,
                InputError::Field("x"),
            ),
            (
                r#"{"type":"mouse","event":"mouseMoved","x":1,"y":1,"button":"back2"}"#,
                InputError::Field("button"),
            ),
            (
                r#"{"type":"key","event":"char","key":"a"}"#,
                InputError::Field("event"),
            ),
            (
                r#"{"type":"key","event":"keyDown","key":"a\u0000"}"#,
                InputError::Field("key"),
            ),
            (&long, InputError::Field("text")),
            (
                r#"{"type":"select","page":"../../x"}"#,
                InputError::Field("page"),
            ),
        ];
        for (msg, want) in cases {
            assert_eq!(parse(msg), Err(want), "{msg}");
        }
    }
}
