package com.example.qnnsample.qnndeploy

/**
 * Why the app runs where it runs: the reason's key in qnndeploy/data/reasons.json, and its text. The Reasons object
 * that makes them, one function per key, is in Generated.kt: reasons.json is the one source of the reason strings of
 * qnndeploy's decision (qnndeploy/decide/decision.py) and of this glue.
 */
data class Reason(val key: String, val text: String)
