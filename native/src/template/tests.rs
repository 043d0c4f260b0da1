use super::*;
use crate::error::ErrorKind;

const CHATML: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

fn templates(list: &[(&str, &str)]) -> ChatTemplates {
    ChatTemplates::new(
        list.iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect(),
        vec![("bos_token".into(), "<s>".into())],
        Limits::default(),
        Clock::Fixed(0),
    )
}

fn request(messages: &str) -> RenderRequest<'_> {
    RenderRequest {
        messages_json: messages,
        add_generation_prompt: true,
        ..Default::default()
    }
}

#[test]
fn renders_with_generation_prompt_and_variables() {
    let t = templates(&[("default", &format!("{{{{ bos_token }}}}{CHATML}"))]);
    let text = t
        .render(&request(r#"[{"role": "user", "content": "hi"}]"#))
        .unwrap();
    assert_eq!(
        text,
        "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn kwargs_override_special_tokens_and_reserved_names_are_refused() {
    let t = templates(&[("default", "{{ bos_token }}|{{ enable_thinking }}")]);
    let mut req = request(r#"[{"role": "user", "content": "x"}]"#);
    req.kwargs_json = r#"{"bos_token": "B", "enable_thinking": false}"#;
    assert_eq!(t.render(&req).unwrap(), "B|False");
    req.kwargs_json = r#"{"messages": []}"#;
    assert_eq!(
        t.render(&req).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn continue_final_message_cuts_like_transformers() {
    let t = templates(&[("default", CHATML)]);
    let mut req = request(
        r#"[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is "}]"#,
    );
    req.add_generation_prompt = false;
    req.continue_final_message = true;
    // The template keeps the tag's space, so the message's trailing space survives.
    assert_eq!(
        t.render(&req).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nThe answer is "
    );
    let trimming = templates(&[(
        "default",
        "{% for m in messages %}[{{ m.content|trim }}]{% endfor %}",
    )]);
    assert_eq!(trimming.render(&req).unwrap(), "[hi][The answer is");
    req.add_generation_prompt = true;
    assert_eq!(
        t.render(&req).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn template_selection() {
    let t = templates(&[("default", "D"), ("tool_use", "T")]);
    let mut req = request(r#"[{"role": "user", "content": "x"}]"#);
    assert_eq!(t.render(&req).unwrap(), "D");
    req.tools_json = r#"[{"type": "function", "function": {"name": "f"}}]"#;
    assert_eq!(t.render(&req).unwrap(), "T");
    req.chat_template = Some("default");
    assert_eq!(t.render(&req).unwrap(), "D");
    req.chat_template = Some("rag");
    assert_eq!(t.render(&req).unwrap_err().kind(), ErrorKind::NotFound);
    req.chat_template = Some("{{ 'inline' }}");
    assert_eq!(
        t.render(&req).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    req.allow_source = true;
    assert_eq!(t.render(&req).unwrap(), "inline");
    assert_eq!(t.render(&req).unwrap(), "inline");
    let none = templates(&[]);
    assert_eq!(
        none.render(&request(r#"[{"role": "user", "content": "x"}]"#))
            .unwrap_err()
            .kind(),
        ErrorKind::FailedPrecondition
    );
}

#[test]
fn raise_exception_message_reaches_the_caller() {
    let t = templates(&[(
        "default",
        "{{ raise_exception('Only user and assistant roles are supported!') }}",
    )]);
    let err = t
        .render(&request(r#"[{"role": "user", "content": "x"}]"#))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        err.message(),
        "chat template error: Only user and assistant roles are supported!"
    );
}

#[test]
fn limits_are_clear_errors() {
    let looping =
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    let tight = Limits {
        fuel: 100_000,
        ..Limits::default()
    };
    let t = ChatTemplates::new(
        vec![("default".into(), looping.into())],
        vec![],
        tight,
        Clock::Now,
    );
    let err = t
        .render(&request(r#"[{"role": "user", "content": "x"}]"#))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");

    let recursive = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let t = templates(&[("default", recursive)]);
    let err = t
        .render(&request(r#"[{"role": "user", "content": "x"}]"#))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");

    let small = Limits {
        max_output_bytes: 100,
        ..Limits::default()
    };
    let t = ChatTemplates::new(
        vec![(
            "default".into(),
            "{% for i in range(1000) %}xxxx{% endfor %}".into(),
        )],
        vec![],
        small,
        Clock::Now,
    );
    let err = t
        .render(&request(r#"[{"role": "user", "content": "x"}]"#))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");
}

#[test]
fn broken_model_templates_fail_requests_not_loading() {
    let t = templates(&[("default", "{% if %}"), ("other", "{{ x|from_json }}")]);
    let err = t
        .render(&request(r#"[{"role": "user", "content": "x"}]"#))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    let mut req = request(r#"[{"role": "user", "content": "x"}]"#);
    req.chat_template = Some("other");
    assert!(t
        .render(&req)
        .unwrap_err()
        .message()
        .contains("No filter named 'from_json'"));
}

#[test]
fn numbers_keep_their_value_through_to_the_template() {
    let t = templates(&[(
        "default",
        "{% for m in messages %}{{ m.tool_calls[0].function.arguments|tojson }}{% endfor %}",
    )]);
    let req = request(
        r#"[{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f",
        "arguments": {"z": 1, "a": 1.0, "big": 123456789012345678901234567890, "tiny": 1e-7, "huge": 1E+100}}}]}]"#,
    );
    assert_eq!(
        t.render(&req).unwrap(),
        r#"{"z": 1, "a": 1.0, "big": 123456789012345678901234567890, "tiny": 1e-07, "huge": 1e+100}"#
    );
}
