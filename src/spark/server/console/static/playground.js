// Spark console playground: sends the conversation to POST /playground/chat (which forwards it to
// /v1/chat/completions with the console's key) and shows the streamed answer as it arrives.
// Everything from the model or the user is written with textContent: it is shown, never run.
// Copyright the Spark authors; part of Spark, same licence.
"use strict";

(function () {
  const settings = document.getElementById("chat-form");
  if (!settings) return;
  const $ = (id) => document.getElementById(id);
  const log = $("pg-log"), errorBox = $("pg-error"), prompt = $("pg-prompt");
  const submit = $("pg-submit"), stop = $("pg-stop"), model = $("pg-model");
  let history = [];  // the conversation so far, as OpenAI messages: exactly the turns shown as sent
  let controller = null;  // the answer being received, if any
  let chat = 0;  // which chat this is: New chat starts another, and an answer of an earlier one changes nothing

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  function syncPanels() {
    const option = model.options[model.selectedIndex];
    $("pg-image-box").hidden = !option || option.dataset.vision !== "yes";
    $("pg-schema-box").hidden = !$("pg-json").checked;
  }
  model.addEventListener("change", () => { syncPanels(); newChat(); });
  $("pg-json").addEventListener("change", syncPanels);
  syncPanels();

  // The conversation follows the newest text, unless the user scrolled up to read: then it stays
  // where they are until they scroll back to the bottom (or send a message).
  let follow = true;
  log.addEventListener("scroll", () => {
    follow = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
  });
  function followNewest() {
    if (follow) log.scrollTop = log.scrollHeight;
  }

  // On a phone the settings open over the conversation, above the composer, from the Settings button.
  const panels = settings.parentElement, toggle = $("pg-settings"), composer = document.querySelector(".composer");
  toggle.addEventListener("click", () => {
    const open = panels.classList.toggle("settings-open");
    toggle.setAttribute("aria-expanded", String(open));
  });
  new ResizeObserver(() => {
    panels.style.setProperty("--composer-height", composer.offsetHeight + "px");
  }).observe(composer);

  function turn(role, text) {
    const box = document.createElement("div");
    box.className = "turn " + (role === "assistant" ? "answer" : "question");
    const who = document.createElement("div");
    who.className = "role";
    who.textContent = role;
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    box.append(who, body);
    log.append(box);
    followNewest();
    return box;
  }

  function newChat() {
    chat += 1;
    if (controller) controller.abort();  // the model stops writing it (its runner cancels the request)
    controller = null;
    submit.disabled = false;
    stop.disabled = true;
    history = [];
    follow = true;
    $("pg-document").value = "";
    log.replaceChildren();
    showError("");
    resetStats();
    showRequest(null);
  }
  $("pg-clear").addEventListener("click", newChat);

  function dataURL(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(new Error("could not read " + file.name));
      reader.readAsDataURL(file);
    });
  }

  // A PDF goes as an OpenAI file part (the server reads its text); any other file is read here as text.
  async function documentPart(file) {
    if (file.type === "application/pdf" || file.name.toLowerCase().endsWith(".pdf")) {
      const data = (await dataURL(file)).split(",")[1];  // the browser may not know the type: say it
      return { type: "file", file: { filename: file.name, file_data: "data:application/pdf;base64," + data } };
    }
    return { type: "text", text: file.name + "\n" + (await file.text()) };
  }

  function number(name) {
    const value = settings.elements[name].value;
    return value === "" ? undefined : Number(value);
  }

  async function body(text) {
    const image = $("pg-image"), documentFile = $("pg-document").files[0];
    const parts = documentFile ? [await documentPart(documentFile), { type: "text", text }] : [{ type: "text", text }];
    if (!$("pg-image-box").hidden && image.files.length) {
      parts.push({ type: "image_url", image_url: { url: await dataURL(image.files[0]) } });
    }
    const content = parts.length > 1 ? parts : text;
    const messages = [];
    const system = $("pg-system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    const user = { role: "user", content };
    const request = {
      model: model.value,
      messages: [...messages, ...history, user],
      stream: true,
      stream_options: { include_usage: true },
      temperature: number("temperature"),
      top_p: number("top_p"),
      max_tokens: number("max_tokens"),
    };
    if ($("pg-json").checked) {
      let schema;
      try {
        schema = JSON.parse($("pg-schema").value);
      } catch (e) {
        throw new Error("The JSON schema is not valid JSON: " + e.message);
      }
      request.response_format = { type: "json_schema", json_schema: { name: "playground", schema } };
    }
    return { request, user, attached: documentFile ? documentFile.name : null };
  }

  const STATS = ["pg-ttft", "pg-speed", "pg-tokens", "pg-cached"];
  function setStat(id, text) { $(id).textContent = text; }
  function resetStats() { for (const id of STATS) setStat(id, "–"); }

  // A turn that is not part of the conversation (it failed, or was stopped before any answer):
  // it stays on screen, marked, and is not sent with the next message.
  function leftOut(boxes, why) {
    for (const box of boxes) box.classList.add("left-out");
    note(boxes[boxes.length - 1], why);
  }

  function note(box, text) {
    const line = document.createElement("div");
    line.className = "note";
    line.textContent = text;
    box.append(line);
    followNewest();
  }

  function count(n, what) { return n + " " + what + (n === 1 ? "" : "s"); }

  async function send(event) {
    event.preventDefault();
    const text = prompt.value.trim();
    if (!text || controller) return;
    const ours = chat;
    const current = () => chat === ours;  // false once New chat (or another model) started over
    showError("");
    let call;
    try {
      call = await body(text);
    } catch (e) {
      if (current()) showError(e.message);
      return;
    }
    if (!current() || controller) return;
    follow = true;  // a message sent shows its answer
    const questionBox = turn("user", call.attached ? text + "\n[" + call.attached + "]" : text);
    const answerBox = turn("assistant", "");
    const answer = answerBox.querySelector(".text");
    answerBox.setAttribute("aria-busy", "true");
    prompt.value = "";
    const mine = new AbortController();
    controller = mine;
    submit.disabled = true;
    stop.disabled = false;
    for (const id of STATS) setStat(id, "…");
    const sent = performance.now();
    let first = null, usage = null, reasoning = null, output = "";
    let pieces = 0;  // chunks of answer received, one token each: the count when a stop leaves no usage
    try {
      const response = await fetch("/playground/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": settings.dataset.csrf },
        body: JSON.stringify(call.request),
        signal: mine.signal,
      });
      if (!current()) return;
      showRequest(response.headers.get("x-request-id"));
      if (!response.ok || !response.body) {
        let message = "HTTP " + response.status;
        try { message = (await response.json()).error.message; } catch (e) { /* not JSON */ }
        throw new Error(message);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          for (const line of frame.split("\n")) {
            if (!line.startsWith("data: ")) continue;
            const data = line.slice(6);
            if (data === "[DONE]") continue;
            const chunk = JSON.parse(data);
            if (chunk.error) throw new Error(chunk.error.message);
            if (chunk.usage) usage = chunk.usage;
            const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
            if (!delta) continue;
            if (delta.content || delta.reasoning_content || delta.tool_calls) pieces += 1;
            if (first === null && pieces) {
              first = performance.now();
              setStat("pg-ttft", Math.round(first - sent) + " ms");
            }
            if (delta.reasoning_content) {
              if (!reasoning) {
                const fold = document.createElement("details");
                fold.className = "reasoning";
                const summary = document.createElement("summary");
                summary.textContent = "Reasoning";
                reasoning = document.createElement("div");
                reasoning.className = "text";
                fold.append(summary, reasoning);
                answerBox.insertBefore(fold, answer);
              }
              reasoning.textContent += delta.reasoning_content;
              followNewest();
            }
            if (delta.content) {
              output += delta.content;
              answer.textContent = output;
              followNewest();
            }
            for (const call of delta.tool_calls || []) {
              const tool = document.createElement("div");
              tool.className = "tool-call";
              tool.textContent = call.function && call.function.name
                ? "tool call: " + call.function.name + "(" + (call.function.arguments || "") + ")"
                : (call.function && call.function.arguments) || "";
              answerBox.append(tool);
              followNewest();
            }
          }
        }
      }
      if (!current()) return;
      keep(call, output);
      showStats(sent, first, performance.now(), usage, pieces);
    } catch (e) {
      if (!current()) return;  // an answer of a chat no longer shown: nothing of it is kept
      const stopped = e.name === "AbortError";
      if (!stopped) showError(e.message);  // a stop is the user's own doing: no error, a note on the turn
      showStats(sent, first, performance.now(), usage, pieces);
      if (stopped && first !== null) {
        keep(call, output);  // as shown: the question and the answer as far as it got
        answerBox.classList.add("stopped");
        note(answerBox, "Stopped after " + count(pieces, "token") + ": kept in the conversation as shown.");
      } else {  // shown, marked, and left out of the conversation, as nothing usable came back
        if (first === null) answerBox.remove();
        leftOut(first === null ? [questionBox] : [questionBox, answerBox],
          (stopped ? "Stopped before the answer began" : "Failed") + ": not sent with the next message.");
      }
    } finally {
      answerBox.removeAttribute("aria-busy");
      if (controller === mine) {
        controller = null;
        submit.disabled = false;
        stop.disabled = true;
      }
    }
  }

  // The turn joins the conversation, so the next message carries it.
  function keep(call, output) {
    history.push(call.user, { role: "assistant", content: output });
    if (call.attached) $("pg-document").value = "";  // the conversation holds it from now on
  }

  function showRequest(id) {
    const cell = $("pg-request");
    cell.replaceChildren();
    if (!id) { cell.textContent = "–"; return; }
    const link = document.createElement("a");
    link.href = "/requests/" + encodeURIComponent(id);
    link.textContent = id;
    link.id = "pg-request-link";
    cell.append(link);
  }

  // `pieces`, the chunks received, stand in for the usage a stopped answer never gets (the log has it
  // in full: its link is shown); what the prompt took is not known here then.
  function showStats(sent, first, end, usage, pieces) {
    if (first === null) setStat("pg-ttft", "–");
    const out = usage ? usage.completion_tokens : pieces;
    setStat("pg-speed", first !== null && out > 1 && end > first
      ? ((out - 1) / ((end - first) / 1000)).toFixed(1) + " tokens/s" : "–");
    setStat("pg-tokens", usage ? usage.prompt_tokens + " in, " + out + " out" : out ? out + " out" : "–");
    const details = usage && usage.prompt_tokens_details;
    setStat("pg-cached", usage ? String((details && details.cached_tokens) || 0) : "–");
  }

  $("pg-send").addEventListener("submit", send);
  stop.addEventListener("click", () => { if (controller) controller.abort(); });
  prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("pg-send").requestSubmit();
  });
})();
