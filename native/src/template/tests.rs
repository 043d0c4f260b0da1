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
fn line_breaks_are_normalized_but_request_templates_are_cached_by_their_text() {
    // Jinja2 reads `\r\n` and `\r` in the source as `\n` (compat::normalize_newlines).
    let t = templates(&[("default", "{% if true %}\r\nA\r\n{% endif %}\rB\r\n")]);
    let mut req = request(r#"[{"role": "user", "content": "x"}]"#);
    assert_eq!(t.render(&req).unwrap(), "A\nB");
    req.allow_source = true;
    let sources = ["{{ 'x' }}\r\ny", "{{ 'x' }}\ny", "{{ 'x' }}\ry"];
    for source in sources {
        req.chat_template = Some(source);
        assert_eq!(t.render(&req).unwrap(), "x\ny", "{source:?}");
    }
    // A request template's identity is its text as sent: three entries, most recent first.
    let cache = t.request_templates.lock().unwrap();
    let keys: Vec<&str> = cache.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(keys, [sources[2], sources[1], sources[0]]);
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

/// `tojson` builds its whole result before the output writer sees it: one filter call over
/// values nested 200 deep with `indent=4` wrote 500 times its input. It stops at the render's
/// output limit instead, with the output limit's error.
#[test]
fn tojson_stops_at_the_output_limit() {
    let small = Limits {
        max_output_bytes: 10_000,
        ..Limits::default()
    };
    let t = ChatTemplates::new(
        vec![("default".into(), "{{ tools | tojson(indent=4) }}".into())],
        vec![],
        small,
        Clock::Now,
    );
    let deep = format!(
        r#"[{{"type": "function", "function": {{"name": "f", "parameters": {{"x": {}{}}}}}}}]"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut req = request(r#"[{"role": "user", "content": "x"}]"#);
    req.tools_json = &deep;
    let err = t.render(&req).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");
    assert!(
        err.message().contains("output limit of 10000 bytes"),
        "{err}"
    );
    // Inline, the same render is handed back for a worker, not refused.
    assert_eq!(
        t.render_inline(&req, &Cancel::default(), 5_000).unwrap(),
        None
    );
}

/// A render on the event loop stops, to run again on a worker, when its template writes more
/// than the inline bound or spends more than the inline fuel; what fits renders as usual.
#[test]
fn inline_renders_stop_at_their_bounds() {
    let echo =
        "{% for m in messages %}{% for n in messages %}{{ m.content }}{% endfor %}{% endfor %}";
    // Walks every pair of messages and writes one byte: work grows with the square of the
    // request, output does not (the shape of templates that look back over the conversation
    // for every message).
    let pairs = "{% for m in messages %}{% for n in messages %}{% if m.content == n.content %}{% endif %}{% endfor %}{% endfor %}x";
    let t = templates(&[("default", echo), ("pairs", pairs)]);
    let messages = |n: usize| {
        let one = r#"{"role": "user", "content": "abcd"}"#;
        format!("[{}]", vec![one; n].join(", "))
    };
    let small = messages(10);
    let full = t.render(&request(&small)).unwrap();
    assert_eq!(full.len(), 400);
    let inline = t
        .render_inline(&request(&small), &Cancel::default(), 400)
        .unwrap();
    assert_eq!(inline.as_deref(), Some(full.as_str()));
    assert_eq!(
        t.render_inline(&request(&small), &Cancel::default(), 399)
            .unwrap(),
        None
    );

    let many = messages(400);
    let mut req = request(&many);
    req.chat_template = Some("pairs");
    assert_eq!(t.render(&req).unwrap(), "x");
    assert_eq!(
        t.render_inline(&req, &Cancel::default(), 1 << 20).unwrap(),
        None,
        "160,000 comparisons are past the inline fuel ({INLINE_FUEL})"
    );
    // A template that adds to a list in a loop (quadratic copies fuel does not charge) never
    // renders inline, however small the request.
    let t = templates(&[(
        "default",
        "{% set ns = namespace(l=[]) %}{% for m in messages %}{% set ns.l = ns.l + [m] %}{% endfor %}{{ ns.l | length }}",
    )]);
    assert_eq!(t.render(&request(&small)).unwrap(), "10");
    assert_eq!(
        t.render_inline(&request(&small), &Cancel::default(), 1 << 20)
            .unwrap(),
        None
    );
    let t = templates(&[("default", echo), ("pairs", pairs)]);
    let few = messages(20);
    let mut req = request(&few);
    req.chat_template = Some("pairs");
    assert_eq!(
        t.render_inline(&req, &Cancel::default(), 1 << 20)
            .unwrap()
            .as_deref(),
        Some("x")
    );
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
        r#"[{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f",
        "arguments": {"z": 1, "a": 1.0, "big": 123456789012345678901234567890, "tiny": 1e-7, "huge": 1E+100}}}]}]"#,
    );
    assert_eq!(
        t.render(&req).unwrap(),
        r#"{"z": 1, "a": 1.0, "big": 123456789012345678901234567890, "tiny": 1e-07, "huge": 1e+100}"#
    );
}

/// Command R+'s tool-use template reads an array's item schema as `json_spec.items`; Jinja2's
/// getattr-first lookup gives the dict method there, so transformers writes `List[Union[]]`
/// (expected output from transformers 5.24, tests/data/render/python_compat/cases.json has more).
#[test]
fn request_dicts_answer_method_names_with_methods() {
    let t = templates(&[(
        "default",
        "{% for t in tools %}{% set p = t.function.parameters.properties.q %}\
         {{ p.items is defined }}|{{ p['items'].type }}|{{ p.items.type is defined }}|\
         {{ p.items()|list|length }}|{{ p.update is defined }}{% endfor %}",
    )]);
    let mut req = request(r#"[{"role": "user", "content": "x"}]"#);
    req.tools_json = r#"[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"q": {"type": "array", "items": {"type": "string"}, "update": 1}}}}}]"#;
    assert_eq!(t.render(&req).unwrap(), "True|string|False|3|False");
}

/// Python's whitespace reaches `|trim` (Llama 3 and Gemma 3 trim message content): U+001F goes.
#[test]
fn trim_uses_python_whitespace() {
    let t = templates(&[(
        "default",
        "{% for m in messages %}[{{ m.content|trim }}]{{ m.content.split() }}{% endfor %}",
    )]);
    let text = t
        .render(&request(
            r#"[{"role": "user", "content": "\u001chello\u001f wor\u00a0ld"}]"#,
        ))
        .unwrap();
    assert_eq!(text, "[hello\u{1f} wor\u{a0}ld]['hello', 'wor', 'ld']");
}

#[test]
fn filters_refuse_results_past_the_output_limit_before_building_them() {
    // Each would allocate gigabytes before the output writer could refuse the first byte.
    let small = Limits {
        max_output_bytes: 10_000,
        ..Limits::default()
    };
    for source in [
        "{{ 'x'|center(10**9) }}",
        "{{ '%*d'|format(10**9, 1) }}",
        "{{ '%.1000000000f'|format(1.5) }}",
        "{{ 'a\nb'|indent(10**9) }}",
        "{{ ('a ' * 4000)|wordwrap(1, wrapstring='-' * 4000) }}",
        "{{ range(3000)|list|pprint }}",
    ] {
        let t = ChatTemplates::new(
            vec![("default".into(), source.into())],
            vec![],
            small,
            Clock::Now,
        );
        let err = t
            .render(&request(r#"[{"role": "user", "content": "x"}]"#))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{source}: {err}");
    }
}
