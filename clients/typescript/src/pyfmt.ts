/**
 * Python's spellings of values in messages: `repr` of a string, a float and parsed JSON, and
 * the `g` format. The gate's reasons quote ids and numbers the way the Python reference
 * engine does, so that the two engines' reasons are the same strings.
 */

/** Python's `repr` of a string: single quotes unless the text holds one and no double. */
export function reprStr(s: string): string {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = q;
  for (const ch of s) {
    const c = ch.codePointAt(0) as number;
    if (ch === q || ch === "\\") out += "\\" + ch;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c === 0xad) {
      out += "\\x" + c.toString(16).padStart(2, "0");
    } else if (c >= 0xd800 && c <= 0xdfff) {
      out += "\\u" + c.toString(16).padStart(4, "0");
    } else out += ch;
  }
  return out + q;
}

/** Python's `repr` of a float: the shortest round-trip digits, `1e-05`, `1e+16`, `100.0`. */
export function reprFloat(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mant, expText] = x.toExponential().split("e") as [string, string];
  const exp = Number(expText);
  const neg = mant.startsWith("-");
  const digits = mant.replace("-", "").replace(".", "");
  const sign = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  if (digits.length <= exp + 1) return `${sign}${digits}${"0".repeat(exp + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
}

/** Python's `format(x, ".{precision}g")` (default precision 6, as `:g`). */
export function formatG(x: number, precision = 6): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const p = Math.max(1, precision);
  const [mant, expText] = x.toExponential(p - 1).split("e") as [string, string];
  const exp = Number(expText);
  if (exp < -4 || exp >= p) {
    const m = mant.includes(".") ? mant.replace(/0+$/, "").replace(/\.$/, "") : mant;
    return `${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  }
  const fixed = x.toFixed(p - 1 - exp);
  return fixed.includes(".") ? fixed.replace(/0+$/, "").replace(/\.$/, "") : fixed;
}

/** Python's `repr` of a value parsed from JSON (numbers as floats; the messages' form). */
export function reprJson(v: unknown): string {
  if (v === null || v === undefined) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "number") return Number.isInteger(v) && Math.abs(v) < 1e16 ? String(v) : reprFloat(v);
  if (typeof v === "string") return reprStr(v);
  if (Array.isArray(v)) return `[${v.map(reprJson).join(", ")}]`;
  if (typeof v === "object") {
    return `{${Object.entries(v as object).map(([k, x]) => `${reprStr(k)}: ${reprJson(x)}`).join(", ")}}`;
  }
  return String(v);
}

/** `repr` of a list of strings, Python's `['a', 'b']`. */
export function reprList(items: readonly string[]): string {
  return `[${items.map(reprStr).join(", ")}]`;
}
