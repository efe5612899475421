-- wrk script: POST the AdmissionReviews of a file (one JSON document per line), round robin.
-- Requests are formatted once in init() so the Lua side costs nothing per request.
local requests = {}
local next_index = 0

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then
      requests[#requests + 1] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, line)
    end
  end
end

function request()
  next_index = next_index % #requests + 1
  return requests[next_index]
end
