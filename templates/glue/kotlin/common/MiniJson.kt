package com.example.qnnsample.qnndeploy

import java.math.BigInteger

// The little JSON the glue needs (the bundle manifest, the failure record, the decision log line), without
// org.json (Android only) or a dependency, so that the selector runs on any JVM.
// Objects parse to Map<String, Any?>, arrays to List<Any?>, integers to Long (BigInteger beyond it), other numbers
// to Double. Strict where Android's org.json is lenient (measured with AOSP's org.json, docs/command-details.md,
// "scaffold"): no comments, trailing text or commas, bad escapes; and nesting is bounded, as bundle verify bounds it,
// so a hostile file fails to parse instead of overflowing the stack.

internal object MiniJson {
    fun parse(text: String): Any? {
        val parser = Parser(text)
        val value = parser.value()
        parser.skipSpace()
        if (parser.pos != text.length) parser.fail("unexpected text after the value")
        return value
    }

    /**
     * Writes like Python's json.dumps(separators=(",", ":")): non-ASCII escaped, so both sides print alike (except
     * for non-integer numbers, which are written in Java's notation: 1.0E20 where Python writes 1e+20).
     */
    fun write(value: Any?): String = StringBuilder().also { write(value, it) }.toString()

    private fun write(value: Any?, out: StringBuilder) {
        when (value) {
            null -> out.append("null")
            is String -> quote(value, out)
            is Boolean, is Long, is Int, is Double, is BigInteger -> out.append(value.toString())
            is Map<*, *> -> {
                out.append('{')
                value.entries.forEachIndexed { i, (k, v) ->
                    if (i > 0) out.append(',')
                    quote(k.toString(), out)
                    out.append(':')
                    write(v, out)
                }
                out.append('}')
            }
            is List<*> -> {
                out.append('[')
                value.forEachIndexed { i, v ->
                    if (i > 0) out.append(',')
                    write(v, out)
                }
                out.append(']')
            }
            else -> quote(value.toString(), out)
        }
    }

    private fun quote(s: String, out: StringBuilder) {
        out.append('"')
        for (c in s) {
            when (c) {
                '"' -> out.append("\\\"")
                '\\' -> out.append("\\\\")
                '\n' -> out.append("\\n")
                '\r' -> out.append("\\r")
                '\t' -> out.append("\\t")
                '\b' -> out.append("\\b")
                '\u000C' -> out.append("\\f")
                else -> if (c < ' ' || c > '~') out.append("\\u%04x".format(c.code)) else out.append(c)
            }
        }
        out.append('"')
    }

    const val MAX_DEPTH = 64  // nested arrays and objects, as qnndeploy/formats/manifest.py MAX_JSON_DEPTH

    private class Parser(val s: String) {
        var pos = 0
        private var depth = 0

        private fun <T> nested(read: () -> T): T {
            if (++depth > MAX_DEPTH) fail("nested deeper than $MAX_DEPTH")
            return read().also { depth-- }
        }

        fun fail(what: String): Nothing = throw IllegalArgumentException("bad JSON at offset $pos: $what")

        fun skipSpace() {
            while (pos < s.length && s[pos] in " \t\r\n") pos++
        }

        fun value(): Any? {
            skipSpace()
            if (pos >= s.length) fail("unexpected end")
            return when (s[pos]) {
                '{' -> nested(::obj)
                '[' -> nested(::array)
                '"' -> string()
                't' -> word("true", true)
                'f' -> word("false", false)
                'n' -> word("null", null)
                else -> number()
            }
        }

        private fun word(w: String, v: Any?): Any? {
            if (!s.startsWith(w, pos)) fail("expected $w")
            pos += w.length
            return v
        }

        private fun obj(): Map<String, Any?> {
            val out = LinkedHashMap<String, Any?>()
            pos++
            skipSpace()
            if (pos < s.length && s[pos] == '}') return out.also { pos++ }
            while (true) {
                skipSpace()
                if (pos >= s.length || s[pos] != '"') fail("expected a key")
                val key = string()
                skipSpace()
                if (pos >= s.length || s[pos] != ':') fail("expected ':'")
                pos++
                out[key] = value()
                skipSpace()
                if (pos >= s.length) fail("unexpected end")
                if (s[pos++] == '}') return out
                if (s[pos - 1] != ',') fail("expected ',' or '}'")
            }
        }

        private fun array(): List<Any?> {
            val out = ArrayList<Any?>()
            pos++
            skipSpace()
            if (pos < s.length && s[pos] == ']') return out.also { pos++ }
            while (true) {
                out.add(value())
                skipSpace()
                if (pos >= s.length) fail("unexpected end")
                if (s[pos++] == ']') return out
                if (s[pos - 1] != ',') fail("expected ',' or ']'")
            }
        }

        private fun string(): String {
            val out = StringBuilder()
            pos++
            while (true) {
                if (pos >= s.length) fail("unterminated string")
                val c = s[pos++]
                when {
                    c == '"' -> return out.toString()
                    c == '\\' -> {
                        if (pos >= s.length) fail("unterminated string")
                        when (val e = s[pos++]) {
                            'u' -> {
                                if (pos + 4 > s.length) fail("bad \\u escape")
                                out.append(s.substring(pos, pos + 4).toIntOrNull(16)?.toChar() ?: fail("bad \\u escape"))
                                pos += 4
                            }
                            'n' -> out.append('\n')
                            'r' -> out.append('\r')
                            't' -> out.append('\t')
                            'b' -> out.append('\b')
                            'f' -> out.append('\u000C')
                            '"', '\\', '/' -> out.append(e)
                            else -> fail("bad escape \\$e")
                        }
                    }
                    c < ' ' -> fail("control character in a string")
                    else -> out.append(c)
                }
            }
        }

        private fun number(): Any {
            val start = pos
            while (pos < s.length && s[pos] in "+-0123456789.eE") pos++
            val t = s.substring(start, pos)
            if (t.isEmpty()) fail("unexpected character '${s[start]}'")
            val isInteger = t.none { it in ".eE" }
            return (if (isInteger) t.toLongOrNull() ?: t.toBigIntegerOrNull() else t.toDoubleOrNull()) ?: fail("bad number $t")
        }
    }
}
