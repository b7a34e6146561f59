"""Model code shared by the reference intent agent and the GPU overflow endpoint.

`functions.intent_model.model`: the embedding session (all-MiniLM-L6-v2, ONNX int8), the intent
classifier and the lexical fallback; `functions.intent_model.answers`: the request body's check
and the answer's shape. No agent or endpoint code lives here; both import it. Importing the
package loads only the standard library.
"""
