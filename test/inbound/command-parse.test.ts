import { describe, expect, it } from "vitest";
import { COMMAND_HELP, parseCommand, type ParsedCommand } from "../../src/inbound/command-parse.js";

type Case = [string, string, ParsedCommand | null];

describe("parseCommand", () => {
  it.each<Case>([
    ["on → on", "/send on", { name: "send", mode: "on" }],
    ["allow → on", "/send allow", { name: "send", mode: "on" }],
    ["off → off", "/send off", { name: "send", mode: "off" }],
    ["deny → off", "/send deny", { name: "send", mode: "off" }],
    ["inherit → inherit", "/send inherit", { name: "send", mode: "inherit" }],
    ["default → inherit", "/send default", { name: "send", mode: "inherit" }],
    ["reset → inherit", "/send reset", { name: "send", mode: "inherit" }],
    ["mode words are case-insensitive", "/SEND OFF", { name: "send", mode: "off" }],
    ["no argument → usage (mode null)", "/send", { name: "send", mode: null }],
    ["an unknown word → usage (mode null)", "/send maybe", { name: "send", mode: null }],
    ["a prototype member name is just an unknown word", "/send constructor", { name: "send", mode: null }],
    ["trailing whitespace is allowed", "/send off   ", { name: "send", mode: "off" }],
    ["extra text after the mode → not a command", "/send off please", null],
    ["a non-letter argument → not a command", "/send 1", null],
    ["glued suffix → not /send", "/sendoff", null],
    ["only the first line counts", "/send off\nand more text", { name: "send", mode: "off" }],
    ["/send on a later line → not a command", "hello\n/send off", null],
    ["/cmd: args is /cmd args", "/send: off", { name: "send", mode: "off" }],
    ["/cmd:args without a space", "/send:deny", { name: "send", mode: "off" }],
  ])("R28 /send must be standalone: %s", (_rule, text, expected) => {
    expect(parseCommand(text)).toEqual(expected);
  });

  it.each<Case>([
    ["/status", "/status", { name: "status" }],
    ["/sid", "/sid", { name: "sid" }],
    ["/stop", "/stop", { name: "stop" }],
    ["/help", "/help", { name: "help" }],
    ["names are case-insensitive", "/Status", { name: "status" }],
    ["leading whitespace is trimmed", "  \n /stop", { name: "stop" }],
    ["trailing whitespace is allowed", "/help \t", { name: "help" }],
    ["a bare colon is allowed", "/sid:", { name: "sid" }],
    ["later lines are ignored", "/status\nwhat is going on?", { name: "status" }],
    ["text after /status → not a command", "/status now", null],
    ["text after /stop → not a command", "/stop it please", null],
    ["text after /help → not a command", "/help me", null],
    ["text after /sid (via colon) → not a command", "/sid: x", null],
    ["punctuation glued to the name → not a command", "/stop!", null],
  ])("standalone commands: %s", (_rule, text, expected) => {
    expect(parseCommand(text)).toEqual(expected);
  });

  it.each<Case>([
    ["bare /new", "/new", { name: "new", rest: "" }],
    ["bare /reset", "/reset", { name: "reset", rest: "" }],
    ["/new keeps the trimmed rest", "/new   tell me a joke  ", { name: "new", rest: "tell me a joke" }],
    ["/reset keeps the rest", "/RESET start over", { name: "reset", rest: "start over" }],
    ["/new: rest via colon", "/new: gpt-5", { name: "new", rest: "gpt-5" }],
    ["the lines after /new go with its rest (the fresh session's first message)", "/new first\nsecond", { name: "new", rest: "first\nsecond" }],
    ["a bare /new with the question on the next line", "/new\r\nwhat is on today?", { name: "new", rest: "what is on today?" }],
    ["/reset keeps the following lines as they are", "/reset:\n  line one\nline two  ", { name: "reset", rest: "line one\nline two" }],
    ["blank lines and spaces before /new: its following lines are still the rest, whole", " \n  /new\nwhat is on today?", { name: "new", rest: "what is on today?" }],
    ["glued suffix → not /new", "/newer", null],
  ])("/new and /reset take the rest of the line: %s", (_rule, text, expected) => {
    expect(parseCommand(text)).toEqual(expected);
  });

  it.each<[string, string, string | undefined, ParsedCommand | null]>([
    ["our bot name is stripped", "/status@SwitchBot", "SwitchBot", { name: "status" }],
    ["bot names compare case-insensitively", "/send@switchbot off", "SwitchBot", { name: "send", mode: "off" }],
    ["bot name then colon", "/new@SwitchBot: hi", "SwitchBot", { name: "new", rest: "hi" }],
    ["another bot's command is not ours", "/status@OtherBot", "SwitchBot", null],
    ["any @name is foreign when we have no username", "/status@SwitchBot", undefined, null],
  ])("/cmd@BotName: %s", (_rule, text, botUsername, expected) => {
    expect(parseCommand(text, { botUsername })).toEqual(expected);
  });

  it.each<Case>([
    ["plain text", "hello there", null],
    ["a command later in the text", "hey /status", null],
    ["unknown command", "/foo", null],
    ["unknown command with args", "/model gpt-5", null],
    ["a lone slash", "/", null],
    ["empty text", "", null],
    ["a path, not a command", "/usr/bin/env", null],
  ])("not a command: %s", (_rule, text, expected) => {
    expect(parseCommand(text)).toEqual(expected);
  });
});

describe("COMMAND_HELP", () => {
  it.each(["/send on|off|inherit", "owners", "/status", "/sid", "/new", "/reset", "/stop", "/help"])(
    "mentions %s",
    (needle) => {
      expect(COMMAND_HELP).toContain(needle);
    },
  );

  it("is several short lines", () => {
    const lines = COMMAND_HELP.split("\n");
    expect(lines.length).toBeGreaterThan(3);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(100);
  });
});
