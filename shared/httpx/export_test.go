package httpx

// DecodeGeneric is the encoding/json path that every body but the reserve
// body takes: the reserve tokenizer is compared with it.
var DecodeGeneric = decodeGeneric
